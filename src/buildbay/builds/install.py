"""Install links: a public page for one build, reached by a signed link a member creates.

The link is `{public_url}/install/{token}`, the token being the link's id and an HMAC of it: no
database lookup for a forged token, and the URL can be shown again for as long as the link lives
(the build record's `installUrl`). Expiry and revocation live on the row, so an expired or
revoked link answers 410, and an unknown one 404.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Annotated

from fastapi import Depends
from sqlalchemy import bindparam, select
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.applications.models import Application
from buildbay.auth.models import User
from buildbay.auth.tokens import derive_key
from buildbay.builds.models import Build, BuildStatus, InstallLink
from buildbay.db.engine import EntityColumns, FastSelect, read_rows
from buildbay.deps import Context, SessionDep
from buildbay.errors import Conflict, Gone, NotFound
from buildbay.ids import new_id

if TYPE_CHECKING:
    from buildbay.deps import AppContext

_SIGNATURE_BYTES = 18  # 144 bits, 24 characters


class InstallTokens:
    """`{link id}.{signature}`: which link, and proof that this server made the URL."""

    def __init__(self, master_key: bytes) -> None:
        self._key = derive_key(master_key, "install-link")

    def _signature(self, link_id: str) -> str:
        digest = hmac.new(self._key, link_id.encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest[:_SIGNATURE_BYTES]).decode()

    def token(self, link_id: str) -> str:
        return f"{link_id}.{self._signature(link_id)}"

    def link_id(self, token: str) -> str | None:
        """The link id of a token this server made, None for anything else."""
        link_id, _, signature = token.partition(".")
        if not link_id or len(token) > 100 or not link_id.isascii():
            return None
        if not hmac.compare_digest(self._signature(link_id), signature):
            return None
        return link_id


@dataclass(frozen=True, slots=True)
class InstallTarget:
    """What the public install page shows."""

    link: InstallLink
    build: Build
    application: Application


_links = InstallLink.__table__
_LINK = EntityColumns(InstallLink, "")


@functools.cache
def _live_links_of_builds(count: int) -> FastSelect:
    """The live links of `count` builds, oldest first. Every build the API shows runs it."""
    return FastSelect(
        select(*_LINK.columns)
        .where(
            _links.c.build_id.in_([bindparam(f"id_{n}") for n in range(count)]),
            _links.c.revoked_at.is_(None),
            _links.c.expires_at > bindparam("now"),
        )
        .order_by(_links.c.id)
    )


class InstallLinks:
    @classmethod
    def of(cls, ctx: AppContext, db: AsyncSession) -> InstallLinks:
        """The request's install links, from the app's context."""
        return cls(db, ctx.clock.now(), ctx.install_tokens, ctx.settings.resolved_public_url)

    def __init__(
        self, db: AsyncSession, now: datetime, tokens: InstallTokens, public_url: str
    ) -> None:
        self.db = db
        self.now = now
        self.tokens = tokens
        self.public_url = public_url

    def url(self, link: InstallLink) -> str:
        return f"{self.public_url}/install/{self.tokens.token(link.id)}"

    async def create(self, build: Build, creator: User, hours: int) -> InstallLink:
        if build.status is not BuildStatus.READY:
            raise Conflict(
                "Only a ready build can have an install link; verify the upload first",
                code="build_not_ready",
            )
        link = InstallLink(
            id=new_id("inl"),
            build_id=build.id,
            created_by=creator.id,
            created_at=self.now,
            expires_at=self.now + timedelta(hours=hours),
            revoked_at=None,
        )
        self.db.add(link)
        await self.db.flush()
        return link

    async def of_build(self, build: Build) -> list[InstallLink]:
        """Every link of the build, newest first, expired and revoked ones included."""
        return list(
            await self.db.scalars(
                select(InstallLink)
                .where(InstallLink.build_id == build.id)
                .order_by(InstallLink.id.desc())
            )
        )

    async def find(self, build: Build, link_id: str) -> InstallLink:
        link = await self.db.scalar(
            select(InstallLink).where(InstallLink.id == link_id, InstallLink.build_id == build.id)
        )
        if link is None:
            raise NotFound(
                "No install link with this id on the build", code="install_link_not_found"
            )
        return link

    async def revoke(self, link: InstallLink) -> None:
        """From now on its page answers 410. Revoking twice changes nothing."""
        if link.revoked_at is None:
            link.revoked_at = self.now
            await self.db.flush()

    async def current(self, build_ids: list[str]) -> dict[str, InstallLink]:
        """The newest live link of each build that has one (transient copies: for showing)."""
        if not build_ids:
            return {}
        # The ids padded with repeats of the first to a power of two, so that a handful of
        # statements, each compiled once, serve every page size.
        size = 1 << (len(build_ids) - 1).bit_length()
        ids = build_ids + build_ids[:1] * (size - len(build_ids))
        params = {f"id_{n}": build_id for n, build_id in enumerate(ids)}
        rows = await read_rows(self.db, _live_links_of_builds(size), {**params, "now": self.now})
        links = (_LINK.of(row) for row in rows)
        return {link.build_id: link for link in links}  # the newest wins: ids sort by time

    async def open(self, token: str) -> InstallTarget:
        """The link, build and application behind a token; 404 if it is not one, 410 if it
        expired or was revoked (or its build was deleted)."""
        link_id = self.tokens.link_id(token)
        if link_id is None:
            raise NotFound("This install link does not exist", code="install_link_not_found")
        row = (
            await self.db.execute(
                select(InstallLink, Build, Application)
                .join(Build, Build.id == InstallLink.build_id)
                .join(Application, Application.id == Build.application_id)
                .where(InstallLink.id == link_id)
            )
        ).first()
        if row is None:
            # Signed by us, so it existed: its build (and with it the link) was deleted.
            raise Gone("The build this link pointed to was deleted", code="install_link_gone")
        link, build, application = row
        if link.revoked_at is not None:
            raise Gone("This install link was revoked", code="install_link_revoked")
        if link.expires_at <= self.now:
            raise Gone("This install link has expired", code="install_link_expired")
        return InstallTarget(link, build, application)


async def install_links(ctx: Context, db: SessionDep) -> InstallLinks:
    return InstallLinks.of(ctx, db)


Links = Annotated[InstallLinks, Depends(install_links)]

"""Install links: a public page for one build, reached by a signed link a member creates.

The link is `{public_url}/install/{token}`, the token being the link's id and an HMAC of it: no
database lookup for a forged token, and the URL can be shown again for as long as the link lives
(the build record's `installUrl`). Expiry and revocation live on the row, so an expired or
revoked link answers 410, and an unknown one 404.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from sqlalchemy import bindparam, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.applications.models import Application
from buildbay.applications.reads import ApplicationRecord
from buildbay.auth.reads import UserRecord
from buildbay.auth.tokens import derive_key
from buildbay.builds.enums import BuildStatus
from buildbay.builds.extras import SHARED_AND_LIVE, LiveLink
from buildbay.builds.models import Build, InstallLink
from buildbay.builds.reads import BuildRecord, not_in_application
from buildbay.constant_time import same_secret
from buildbay.db.concurrency import lock_row
from buildbay.db.reads import Reads, RecordOf
from buildbay.errors import Conflict, Forbidden, Gone, NotFound
from buildbay.ids import new_id
from buildbay.projects.enums import ProjectRole

if TYPE_CHECKING:
    from buildbay.context import AppContext

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
        if not same_secret(signature, self._signature(link_id)):
            return None
        return link_id


@dataclass(frozen=True, slots=True)
class InstallLinkRecord:
    id: str
    build_id: str
    created_by: str | None
    created_at: datetime
    expires_at: datetime
    revoked_at: datetime | None


LINK = RecordOf(InstallLinkRecord, InstallLink)
_TARGET_LINK = RecordOf(InstallLinkRecord, InstallLink, "link_")
_TARGET_BUILD = RecordOf(BuildRecord, Build, "build_")
_TARGET_APPLICATION = RecordOf(ApplicationRecord, Application, "app_")


@dataclass(frozen=True, slots=True)
class InstallTarget:
    """What the public install page shows."""

    link: InstallLinkRecord
    build: BuildRecord
    application: ApplicationRecord


# Built once: share and the update check run it, and composing it costs more than running it.
_LIVE_LINKS_OF_BUILDS = (
    select(*LINK.columns)
    .where(InstallLink.build_id.in_(bindparam("ids", expanding=True)), SHARED_AND_LIVE)
    .order_by(InstallLink.id)
)
_LINKS_OF_BUILD = (
    select(*LINK.columns)
    .where(InstallLink.build_id == bindparam("build_id"))
    .order_by(InstallLink.id.desc())
)
_LINK_OF_BUILD = select(*LINK.columns).where(
    InstallLink.id == bindparam("link_id"), InstallLink.build_id == bindparam("build_id")
)
_TARGET = (
    select(*_TARGET_LINK.columns, *_TARGET_BUILD.columns, *_TARGET_APPLICATION.columns)
    .join(Build, Build.id == InstallLink.build_id)
    .join(Application, Application.id == Build.application_id)
    .where(InstallLink.id == bindparam("link_id"))
)


class InstallLinkReads:
    """Install links as read: on a read-only request's reads, or a unit of work's."""

    @classmethod
    def of(cls, ctx: AppContext, reads: Reads) -> InstallLinkReads:
        return cls(reads, ctx.clock.now(), ctx.install_tokens, ctx.settings.resolved_public_url)

    def __init__(self, reads: Reads, now: datetime, tokens: InstallTokens, public_url: str) -> None:
        self.reads = reads
        self.now = now
        self.tokens = tokens
        self.public_url = public_url

    def url(self, link: InstallLinkRecord | LiveLink) -> str:
        return f"{self.public_url}/install/{self.tokens.token(link.id)}"

    async def of_build(self, build: BuildRecord) -> list[InstallLinkRecord]:
        """Every link of the build, newest first, expired and revoked ones included."""
        return [
            LINK.of(row) for row in await self.reads.all(_LINKS_OF_BUILD, {"build_id": build.id})
        ]

    async def find(self, build: BuildRecord, link_id: str) -> InstallLinkRecord:
        row = await self.reads.first(_LINK_OF_BUILD, {"link_id": link_id, "build_id": build.id})
        if row is None:
            raise NotFound(
                "No install link with this id on the build", code="install_link_not_found"
            )
        return LINK.of(row)

    async def current(self, build_ids: list[str]) -> dict[str, InstallLinkRecord]:
        """The newest live link of each build that has one."""
        if not build_ids:
            return {}
        rows = await self.reads.all(_LIVE_LINKS_OF_BUILDS, {"ids": build_ids, "now": self.now})
        # The newest wins: ids sort by time.
        return {row["build_id"]: LINK.of(row) for row in rows}

    async def open(self, token: str) -> InstallTarget:
        """The link, build and application behind a token; 404 if it is not one, 410 if it
        expired or was revoked (or its build was deleted)."""
        link_id = self.tokens.link_id(token)
        if link_id is None:
            raise NotFound("This install link does not exist", code="install_link_not_found")
        row = await self.reads.first(_TARGET, {"link_id": link_id})
        if row is None:
            # Signed by us, so it existed: its build (and with it the link) was deleted.
            raise Gone("The build this link pointed to was deleted", code="install_link_gone")
        link = _TARGET_LINK.of(row)
        if link.revoked_at is not None:
            raise Gone("This install link was revoked", code="install_link_revoked")
        if link.expires_at <= self.now:
            raise Gone("This install link has expired", code="install_link_expired")
        return InstallTarget(link, _TARGET_BUILD.of(row), _TARGET_APPLICATION.of(row))


class InstallLinks:
    """Creating and revoking install links, in a unit of work."""

    @classmethod
    def of(cls, ctx: AppContext, db: AsyncSession) -> InstallLinks:
        """The request's install links, from the app's context."""
        return cls(db, InstallLinkReads.of(ctx, Reads.within(db)))

    def __init__(self, db: AsyncSession, reads: InstallLinkReads) -> None:
        self.db = db
        self.reads = reads
        self.now = reads.now

    async def create(
        self, build: BuildRecord, creator: UserRecord | None, hours: int
    ) -> InstallLinkRecord:
        """A new link; `creator` None: made by the server (an update check's, updates/)."""
        if build.status is not BuildStatus.READY:
            raise Conflict(
                "Only a ready build can have an install link; verify the upload first",
                code="build_not_ready",
            )
        link = InstallLink(
            id=new_id("inl"),
            build_id=build.id,
            created_by=creator.id if creator is not None else None,
            created_at=self.now,
            expires_at=self.now + timedelta(hours=hours),
            revoked_at=None,
        )
        self.db.add(link)
        await self.db.flush()
        return LINK.of_entity(link)

    async def revoke(self, link: InstallLinkRecord, by: UserRecord, role: ProjectRole) -> None:
        """From now on its page answers 410. Its creator may revoke it, and a developer or
        higher any link. Revoking twice changes nothing."""
        if link.created_by != by.id and not role.includes(ProjectRole.DEVELOPER):
            raise Forbidden(
                "Only its creator or a developer (or higher) can revoke this link",
                code="insufficient_role",
            )
        await self.db.execute(
            update(InstallLink)
            .where(InstallLink.id == link.id, InstallLink.revoked_at.is_(None))
            .values(revoked_at=self.now)
        )

    async def share(
        self,
        build: BuildRecord,
        creator: UserRecord | None,
        hours: int,
        *,
        min_left: timedelta = timedelta(0),
    ) -> InstallLinkRecord:
        """The build's live install link, or a new one if it has none: a retried verify (CI
        retries, and may send twice at once) or a second click reuses the link rather than
        adding another. A link with less than `min_left` to live counts as none (an update
        check's must outlive the download it offers). The build's row is locked first, so
        that of concurrent calls one creates the link and the others find it."""
        if not await lock_row(self.db, Build.id, build.id):
            raise not_in_application()
        current = (await self.reads.current([build.id])).get(build.id)
        if current is not None and current.expires_at - self.now >= min_left:
            return current
        return await self.create(build, creator, hours)

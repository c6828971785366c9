"""Install links: a public page for one build, reached by a signed link a member creates.

The link is `{public_url}/install/{token}`, the token being the link's id and an HMAC of it: no
database lookup for a forged token, and the URL can be shown again for as long as the link lives
(the build record's `installUrl`). Expiry and revocation live on the row, so an expired or
revoked link answers 410, and an unknown one 404.

A link is shared (a developer's, or the update check's: anyone holding it may open it) or
personal (`owner_id`: a distribution mail's, or a tester's own from the console). A personal
link opens only while its person may open the build, asked of distribution/visibility.py each
time it is opened; when they may not, it answers exactly as a revoked link does. What is done
through it is theirs, and someone else signed in cannot use it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import bindparam, select, update
from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.applications.models import Application
from buildbay.applications.records import ApplicationRecord
from buildbay.audit.record import SYSTEM, Actor, AuditAction, Target, record
from buildbay.auth.models import User
from buildbay.auth.reads import UserRecord
from buildbay.auth.tokens import derive_key
from buildbay.builds.enums import BuildStatus
from buildbay.builds.extras import SHARED_AND_LIVE, LiveLink
from buildbay.builds.models import Build, InstallLink
from buildbay.builds.reads import not_in_application
from buildbay.builds.records import BuildRecord
from buildbay.constant_time import same_secret
from buildbay.db.concurrency import lock_row
from buildbay.db.reads import Reads, RecordOf
from buildbay.distribution.visibility import LINK_OWNER, OPENED_BY_OWNER
from buildbay.errors import Conflict, Forbidden, Gone, NotFound
from buildbay.ids import new_id

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
    owner_id: str | None  # None: a shared link
    created_at: datetime
    expires_at: datetime
    revoked_at: datetime | None


@dataclass(frozen=True, slots=True)
class LinkOwner:
    """The person a personal link is for."""

    user_id: str
    email: str
    name: str | None


@dataclass(frozen=True, slots=True)
class ListedLink:
    """A link as the lists show it: with its person, if it is a personal link."""

    link: InstallLinkRecord
    owner: LinkOwner | None


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
    select(*LINK.columns, User.email.label("owner_email"), User.name.label("owner_name"))
    .outerjoin(User, User.id == InstallLink.owner_id)
    .where(InstallLink.build_id == bindparam("build_id"))
    .order_by(InstallLink.id.desc())
)
_OWN_LINKS_OF_BUILD = _LINKS_OF_BUILD.where(InstallLink.owner_id == bindparam("owner_id"))
_OWN_LIVE_LINK = (
    select(*LINK.columns)
    .where(
        InstallLink.build_id == bindparam("build_id"),
        InstallLink.owner_id == bindparam("owner_id"),
        InstallLink.revoked_at.is_(None),
        InstallLink.expires_at > bindparam("now"),
    )
    .order_by(InstallLink.id.desc())
    .limit(1)
)
_LINK_OF_BUILD = select(*LINK.columns).where(
    InstallLink.id == bindparam("link_id"), InstallLink.build_id == bindparam("build_id")
)
_TARGET = (
    select(
        *_TARGET_LINK.columns,
        *_TARGET_BUILD.columns,
        *_TARGET_APPLICATION.columns,
        OPENED_BY_OWNER.label("owner_may_open"),
    )
    .join(Build, Build.id == InstallLink.build_id)
    .join(Application, Application.id == Build.application_id)
    .outerjoin(LINK_OWNER, LINK_OWNER.c.id == InstallLink.owner_id)
    .where(InstallLink.id == bindparam("link_id"))
)


class InstallLinkReads:
    """Install links as read: on a read-only request's reads, or a unit of work's."""

    def __init__(self, reads: Reads, now: datetime, tokens: InstallTokens, public_url: str) -> None:
        self.reads = reads
        self.now = now
        self.tokens = tokens
        self.public_url = public_url

    def url(self, link: InstallLinkRecord | LiveLink) -> str:
        return f"{self.public_url}/install/{self.tokens.token(link.id)}"

    async def of_build(self, build: BuildRecord, owner_id: str | None = None) -> list[ListedLink]:
        """Every link of the build (`owner_id`: only that person's own), newest first, expired
        and revoked ones included, each with its person if it is a personal link."""
        if owner_id is None:
            rows = await self.reads.all(_LINKS_OF_BUILD, {"build_id": build.id})
        else:
            params = {"build_id": build.id, "owner_id": owner_id}
            rows = await self.reads.all(_OWN_LINKS_OF_BUILD, params)
        return [_listed(row) for row in rows]

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

    async def open(
        self, token: str, visitor: Callable[[], Awaitable[str | None]] | None = None
    ) -> InstallTarget:
        """The link, build and application behind a token; 404 if it is not one, 410 if it
        expired or was revoked (or its build was deleted), or if it is a personal link whose
        person may no longer open the build (the same answer as a revoked link: a holder of the
        link learns nothing of the person's membership). `visitor_id`: who is signed in on this
        browser, if anyone; someone else's personal link is refused to them (403)."""
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
        if not row["owner_may_open"]:
            raise Gone("This install link was revoked", code="install_link_revoked")
        if (
            link.owner_id is not None
            and visitor is not None
            and (visitor_id := await visitor()) is not None
            and visitor_id != link.owner_id
        ):
            raise Forbidden(
                "This install link was made for someone else: what is done through it counts "
                "as theirs. Sign out to use it, or open the build from your own account",
                code="not_your_install_link",
            )
        return InstallTarget(link, _TARGET_BUILD.of(row), _TARGET_APPLICATION.of(row))


class InstallLinks:
    """Creating and revoking install links, in a unit of work."""

    def __init__(self, db: AsyncSession, reads: InstallLinkReads) -> None:
        self.db = db
        self.reads = reads
        self.now = reads.now

    async def create(
        self,
        build: BuildRecord,
        creator: UserRecord | None,
        hours: int,
        *,
        owner: UserRecord | None = None,
    ) -> InstallLinkRecord:
        """A new link; `creator` None: made by the server (an update check's, updates/).
        `owner`: a personal link, theirs; else a shared one."""
        if build.status is not BuildStatus.READY:
            raise Conflict(
                "Only a ready build can have an install link; verify the upload first",
                code="build_not_ready",
            )
        link = InstallLink(
            id=new_id("inl"),
            build_id=build.id,
            created_by=creator.id if creator is not None else None,
            owner_id=owner.id if owner is not None else None,
            created_at=self.now,
            expires_at=self.now + timedelta(hours=hours),
            revoked_at=None,
        )
        self.db.add(link)
        await self.db.flush()
        by = Actor.of(creator) if creator is not None else SYSTEM
        details = {"expiresAt": link.expires_at.isoformat(), "personal": owner is not None}
        self._record(by, AuditAction.INSTALL_LINK_CREATED, link.id, build, details)
        return LINK.of_entity(link)

    async def revoke(self, link: InstallLinkRecord, build: BuildRecord, *, by: Actor) -> None:
        """From now on its page answers 410 (who may: a developer or higher, checked by the
        callers' authorization). Revoking twice changes nothing."""
        revoked = await self.db.execute(
            update(InstallLink)
            .where(InstallLink.id == link.id, InstallLink.revoked_at.is_(None))
            .values(revoked_at=self.now)
        )
        if revoked.rowcount:  # type: ignore[attr-defined]
            self._record(by, AuditAction.INSTALL_LINK_REVOKED, link.id, build, {})

    def _record(
        self,
        by: Actor,
        action: AuditAction,
        link_id: str,
        build: BuildRecord,
        details: dict[str, Any],
    ) -> None:
        """An entry naming the link by its id (its URL's signature never goes in)."""
        record(self.db, at=self.now, actor=by, action=action,
               target=Target("install_link", link_id, build.file_name),
               project_id=build.project_id, details={"buildId": build.id, **details})  # fmt: skip

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

    async def own(self, build: BuildRecord, person: UserRecord, hours: int) -> InstallLinkRecord:
        """`person`'s own live link of the build (from their mail, or made here before), or a new
        personal link: what a tester installs through, never a link others could use."""
        row = await self.reads.reads.first(
            _OWN_LIVE_LINK, {"build_id": build.id, "owner_id": person.id, "now": self.now}
        )
        if row is not None:
            return LINK.of(row)
        return await self.create(build, person, hours, owner=person)


def _listed(row: RowMapping) -> ListedLink:
    link = LINK.of(row)
    if link.owner_id is None:
        return ListedLink(link, None)
    return ListedLink(link, LinkOwner(link.owner_id, row["owner_email"], row["owner_name"]))

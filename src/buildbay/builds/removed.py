"""Nothing vanishes silently: a ready build that is deleted (by a member, or by the sweeper for
the application's retention rule) is told of and remembered.

- A `build.deleted` event says so, with its `reason` (`member` or `retention`).
- Its row in `removed_builds` (with its install links' ids) stays REMOVED_BUILDS_KEPT: the
  application's page lists the last RECENT_DAYS' removals, and an install link of the build
  still finds its application, so that its page can offer whoever opens it the newest build they
  may install (`newest_for`) instead of a dead end.

Everything here runs in the unit of work that deletes the rows, before they go.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import cast

from sqlalchemy import Table, bindparam, delete, false, insert, null, select, true, union
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.auth.models import User
from buildbay.builds.enums import BuildStatus, RemovalReason
from buildbay.builds.models import Build, InstallLink, RemovedBuild, RemovedInstallLink
from buildbay.builds.reads import BuildReads
from buildbay.builds.records import BuildRecord
from buildbay.builds.schemas import version_label
from buildbay.db.engine import insert_rows
from buildbay.db.reads import Reads, RecordOf
from buildbay.distribution.models import BuildGroup, BuildRecipient
from buildbay.distribution.visibility import viewer_of
from buildbay.errors import NotFound
from buildbay.projects.models import ProjectMember
from buildbay.webhooks import events as webhook_events

# Long enough for the install links of a build's last distribution mails (90 days at most) to
# find its application again; the application's page shows the last RECENT_DAYS.
REMOVED_BUILDS_KEPT = timedelta(days=90)
RECENT_DAYS = 30


@dataclass(frozen=True, slots=True)
class RemovedBuildRecord:
    id: str
    project_id: str
    application_id: str
    file_name: str
    version: str | None
    reason: RemovalReason
    removed_by: str | None
    removed_at: datetime
    distributed: bool


REMOVED = RecordOf(RemovedBuildRecord, RemovedBuild)
_REMOVED_TABLE = cast("Table", RemovedBuild.__table__)
_REMOVED_LINKS_TABLE = cast("Table", RemovedInstallLink.__table__)
_DISTRIBUTED = union(
    select(BuildGroup.build_id).where(BuildGroup.build_id.in_(bindparam("ids", expanding=True))),
    select(BuildRecipient.build_id).where(
        BuildRecipient.build_id.in_(bindparam("ids", expanding=True))
    ),
)
_LINKS_OF = select(InstallLink.id, InstallLink.build_id).where(
    InstallLink.build_id.in_(bindparam("ids", expanding=True))
)


async def record_removals(
    db: AsyncSession,
    builds: list[BuildRecord],
    reason: RemovalReason,
    by: str | None,
    now: datetime,
    public_url: str,
) -> None:
    """Before the rows of `builds` go: a `build.deleted` event for each (with `reason`), and the
    ready ones remembered with their install links."""
    for build in builds:
        await webhook_events.build_deleted(db, build, public_url, now, reason=reason.value)
    ready = [b for b in builds if b.status is BuildStatus.READY]
    if not ready:
        return
    ids = [b.id for b in ready]
    distributed = {row[0] for row in await db.execute(_DISTRIBUTED, {"ids": ids})}
    await insert_rows(
        db,
        _REMOVED_TABLE,
        [
            {
                "id": b.id,
                "project_id": b.project_id,
                "application_id": b.application_id,
                "file_name": b.file_name,
                "version": version_label(b.metadata_),
                "reason": reason,
                "removed_by": by,
                "removed_at": now,
                "distributed": b.id in distributed,
            }
            for b in ready
        ],
    )
    await db.execute(
        insert(_REMOVED_LINKS_TABLE).from_select(["id", "build_id"], _LINKS_OF),
        {"ids": ids},
    )


_RECENT = (
    select(*REMOVED.columns)
    .where(
        RemovedBuild.application_id == bindparam("application_id"),
        RemovedBuild.removed_at > bindparam("since"),
    )
    .order_by(RemovedBuild.removed_at.desc(), RemovedBuild.id.desc())
    .limit(200)
)


async def recent_removals(
    reads: Reads, application_id: str, now: datetime
) -> list[RemovedBuildRecord]:
    """The application's builds removed in the last RECENT_DAYS, the latest first."""
    params = {"application_id": application_id, "since": now - timedelta(days=RECENT_DAYS)}
    return [REMOVED.of(row) for row in await reads.all(_RECENT, params)]


async def forget_old_removals(db: AsyncSession, now: datetime) -> int:
    """The sweeper's: removals older than REMOVED_BUILDS_KEPT (their links go with them)."""
    result = await db.execute(
        delete(RemovedBuild)
        .where(RemovedBuild.removed_at < now - REMOVED_BUILDS_KEPT)
        .returning(RemovedBuild.id)
    )
    return len(result.all())


# -- what an install link that no longer works pointed to ------------------------------------------


@dataclass(frozen=True, slots=True)
class LinkedBuild:
    """The build an install link was made for: still there (its link expired or was revoked),
    or removed (`removed`)."""

    build_id: str
    project_id: str
    application_id: str
    label: str  # its version, or its file name
    removed: bool


_LINK_OF_BUILD = (
    select(
        Build.id, Build.project_id, Build.application_id, Build.file_name,
        Build.metadata_.label("metadata"),
        null().label("version"), false().label("removed"),
    )
    .join(InstallLink, InstallLink.build_id == Build.id)
    .where(InstallLink.id == bindparam("link_id"))
)  # fmt: skip
_LINK_OF_REMOVED = (
    select(
        RemovedBuild.id, RemovedBuild.project_id, RemovedBuild.application_id,
        RemovedBuild.file_name, null().label("metadata"), RemovedBuild.version,
        true().label("removed"),
    )
    .join(RemovedInstallLink, RemovedInstallLink.build_id == RemovedBuild.id)
    .where(RemovedInstallLink.id == bindparam("link_id"))
)  # fmt: skip


async def linked_build(reads: Reads, link_id: str) -> LinkedBuild | None:
    """What the link `link_id` was made for, if it is still known."""
    for statement in (_LINK_OF_BUILD, _LINK_OF_REMOVED):
        row = await reads.first(statement, {"link_id": link_id})
        if row is not None:
            label = row["version"] or version_label(row["metadata"]) or row["file_name"]
            return LinkedBuild(
                row["id"], row["project_id"], row["application_id"], label, bool(row["removed"])
            )
    return None


_MEMBER = (
    select(ProjectMember.role, User.email)
    .join(User, User.id == ProjectMember.user_id)
    .where(
        ProjectMember.project_id == bindparam("project_id"),
        ProjectMember.user_id == bindparam("user_id"),
    )
)


async def newest_for(builds: BuildReads, linked: LinkedBuild, user_id: str) -> BuildRecord | None:
    """The newest ready build of the linked build's application that `user_id` may open (all,
    for a developer or higher; those distributed to them, for a tester), if it is newer than the
    linked build (or the linked build itself, still there and still theirs); None for someone
    outside the project."""
    row = await builds.reads.first(_MEMBER, {"project_id": linked.project_id, "user_id": user_id})
    if row is None:
        return None
    viewer = viewer_of(row["role"], user_id, row["email"])
    try:
        newest = await builds.latest(linked.application_id, None, viewer)
    except NotFound:
        return None
    if newest.id > linked.build_id or (newest.id == linked.build_id and not linked.removed):
        return newest
    return None

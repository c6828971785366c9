"""Tester groups as membership changes: an accepted invitation joins the groups it was for; a
member who leaves the project leaves its groups.

Whoever joins a group (added to it, or by accepting an invitation that was for it), or the
project (and so `everyone`), sees the builds already distributed to it, and becomes their
recipient (`reach_builds_of_groups`), so that a build's report of who it reached and who
installed it lists them too. They are not mailed: joining a group must not bring a backlog of
old builds into their inbox, the newest included; the builds are on their page (and a developer
who wants them told distributes a build to their e-mail, which mails them once). Someone who
joins while a group's distribution job has not run yet is, likewise, its recipient unmailed.
Only ready builds that still exist are ever included (a deleted build's rows go with it). A
new member's e-mail may have been given builds while it was only invited: those rows become
theirs (`user_id`), so that the reports attribute their installs to them.

One exception to "not mailed": someone who joins by accepting an invitation was never told
about the builds given to them while they were invited (named by e-mail, or distributed to a
group the invitation was for, or to everyone). Of those, the newest of each application is
mailed to them with their own install link (`mail_newest_on_joining`), unless they turned
new-build mails off; the older ones are on their page, unmailed.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Boolean, DateTime, String, delete, func, literal, select, true, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.sql.dml import Insert

from buildbay.auth.models import User
from buildbay.builds.enums import BuildStatus
from buildbay.builds.models import Build
from buildbay.db.base import Base
from buildbay.distribution.models import (
    EVERYONE,
    BuildGroup,
    BuildRecipient,
    GroupTester,
    InvitationGroup,
    TesterGroup,
)
from buildbay.jobs.queue import enqueue

# The job that writes a distribution's recipients and mails them (distribution/service.py).
DISTRIBUTION_JOB = "distribution"


def insert_of(db: AsyncSession, model: type[Base]) -> Insert:
    """An INSERT of the database's dialect, which knows ON CONFLICT DO NOTHING."""
    if db.get_bind().dialect.name == "sqlite":
        return sqlite.insert(model)
    return postgresql.insert(model)


async def insert_ignoring_duplicates(
    db: AsyncSession, model: type[Base], rows: Sequence[Mapping[str, Any]]
) -> None:
    """INSERT the rows, leaving out those whose key exists (or is being inserted by a
    concurrent transaction that then commits)."""
    if rows:
        statement = insert_of(db, model).on_conflict_do_nothing()  # type: ignore[attr-defined]
        await db.execute(statement, [dict(row) for row in rows])


async def join_invited_groups(
    db: AsyncSession, invitation_id: str, user_id: str, now: datetime
) -> list[str]:
    """The groups an accepted invitation was for, joined by the user who accepted it: the ids
    of those they were not in already."""
    joined = select(
        InvitationGroup.group_id,
        literal(user_id, String()),
        literal(now, DateTime(timezone=True)),
    ).where(InvitationGroup.invitation_id == invitation_id)
    statement = insert_of(db, GroupTester).from_select(["group_id", "user_id", "added_at"], joined)
    statement = statement.on_conflict_do_nothing()  # type: ignore[attr-defined]
    return list((await db.execute(statement.returning(GroupTester.group_id))).scalars().all())


async def reach_builds_of_groups(
    db: AsyncSession,
    now: datetime,
    project_id: str,
    user_ids: Collection[str],
    group_ids: Collection[str],
) -> None:
    """Members who just joined the groups (`everyone` for a new member): recipients of the
    project's ready builds distributed to them, unmailed (those a build reached already are
    left as they are). One INSERT ... SELECT, however many builds and people."""
    if not user_ids or not group_ids:
        return
    reached = (
        select(
            Build.id,
            User.email,
            User.id,
            literal(now, DateTime(timezone=True)),
            literal(False, Boolean()),
        )
        .distinct()  # a build distributed to two of the groups
        .join(BuildGroup, BuildGroup.build_id == Build.id)
        .join(User, User.id.in_(list(user_ids)))
        .where(
            Build.project_id == project_id,
            Build.status == BuildStatus.READY,
            BuildGroup.group_id.in_(list(group_ids)),
        )
    )
    statement = insert_of(db, BuildRecipient).from_select(
        ["build_id", "email", "user_id", "reached_at", "notify"], reached
    )
    await db.execute(statement.on_conflict_do_nothing())  # type: ignore[attr-defined]


async def reach_new_member(
    db: AsyncSession,
    now: datetime,
    project_id: str,
    user_id: str,
    email: str,
    joined_groups: Collection[str] = (),
) -> None:
    """A user just made a member of the project (and of `joined_groups`): the builds their
    e-mail was given as an invitee are theirs (the reports attribute what they do to those
    rows), and they are recipients of the builds of `everyone` and of those groups."""
    await db.execute(
        update(BuildRecipient)
        .where(
            BuildRecipient.email == email,
            BuildRecipient.user_id.is_(None),
            BuildRecipient.build_id.in_(select(Build.id).where(Build.project_id == project_id)),
        )
        .values(user_id=user_id)
        .execution_options(synchronize_session=False)
    )
    await reach_builds_of_groups(db, now, project_id, [user_id], [EVERYONE, *joined_groups])


async def mail_newest_on_joining(
    db: AsyncSession, now: datetime, project_id: str, user_id: str
) -> list[str]:
    """A person who just joined by accepting an invitation: of the project's ready builds they
    are a recipient of and were never mailed, the newest of each application is to be mailed
    to them (by the distribution job, with their own install link), unless they turned
    new-build mails off. The ids of those builds."""
    wants = await db.scalar(select(User.notify_new_builds).where(User.id == user_id))
    if not wants:
        return []
    unmailed = (
        select(
            Build.id,
            func.row_number()
            .over(
                partition_by=Build.application_id,
                order_by=(Build.created_at.desc(), Build.id.desc()),
            )
            .label("newest"),
        )
        .join(BuildRecipient, BuildRecipient.build_id == Build.id)
        .where(
            Build.project_id == project_id,
            Build.status == BuildStatus.READY,
            BuildRecipient.user_id == user_id,
            BuildRecipient.notified_at.is_(None),
            BuildRecipient.mail_error.is_(None),
        )
        .subquery()
    )
    build_ids = list((await db.scalars(select(unmailed.c.id).where(unmailed.c.newest == 1))).all())
    if not build_ids:
        return []
    await db.execute(
        update(BuildRecipient)
        .where(BuildRecipient.user_id == user_id, BuildRecipient.build_id.in_(build_ids))
        .values(notify=true())
        .execution_options(synchronize_session=False)
    )
    for build_id in sorted(build_ids):
        enqueue(db, DISTRIBUTION_JOB, {"buildId": build_id}, now)
    return build_ids


async def leave_groups(db: AsyncSession, project_id: str, user_id: str) -> None:
    """The user's place in the project's groups, gone with their membership (were they added
    again, they would not be back in the old groups)."""
    await db.execute(
        delete(GroupTester).where(
            GroupTester.user_id == user_id,
            GroupTester.group_id.in_(
                select(TesterGroup.id).where(TesterGroup.project_id == project_id)
            ),
        )
    )

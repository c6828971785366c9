"""Tester groups: who they hold, and what changes them.

Every project has the built-in group `everyone` (all its members), which has no row. Other
groups hold members of the project; an e-mail added to a group that is not a member's gets an
invitation as tester, and joins the group when it is accepted (`join_invited_groups`). A member
who joins a group becomes, unmailed, a recipient of the builds already distributed to it
(membership.py says why).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import bindparam, delete, func, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.applications.models import Application
from buildbay.auth.models import User
from buildbay.db.concurrency import insert_unless_present
from buildbay.db.reads import Reads
from buildbay.distribution.membership import (
    insert_ignoring_duplicates,
    insert_of,
    reach_builds_of_groups,
)
from buildbay.distribution.models import (
    EVERYONE,
    BuildGroup,
    GroupTester,
    InvitationGroup,
    TesterGroup,
)
from buildbay.errors import Conflict, NotFound, ValidationFailed
from buildbay.ids import new_id, split_page
from buildbay.invitations.caps import Admission
from buildbay.invitations.models import Invitation
from buildbay.invitations.service import InvitationService
from buildbay.projects.authorization import ProjectAccess
from buildbay.projects.enums import ProjectRole
from buildbay.projects.models import ProjectMember
from buildbay.projects.records import ProjectRecord
from buildbay.text import normal_email_text


@dataclass(frozen=True, slots=True)
class GroupRecord:
    id: str
    name: str
    testers_count: int
    created_at: datetime

    @property
    def builtin(self) -> bool:
        return self.id == EVERYONE


@dataclass(frozen=True, slots=True)
class TesterRecord:
    user_id: str
    email: str
    name: str
    role: ProjectRole
    added_at: datetime
    email_verified: bool = False  # as a member's (projects/reads.py MemberRecord)


@dataclass(frozen=True, slots=True)
class TestersAdded:
    testers: list[TesterRecord]  # members now in the group (whether or not they were before)
    invited: list[str]  # e-mails invited into the project, who join the group on accepting
    admission: Admission  # of the e-mails to mail: refused ones are not invited


def group_not_found() -> NotFound:
    return NotFound("No tester group with this id in the project", code="group_not_found")


def builtin_group() -> Conflict:
    return Conflict(
        "The group everyone holds all the project's members; it cannot be changed or deleted "
        "(remove a member from the project instead)",
        code="builtin_group",
    )


# -- reading ------------------------------------------------------------------------------------

_MEMBERS_COUNT = select(func.count()).where(ProjectMember.project_id == bindparam("project_id"))
_MEMBERS_OF_GROUP = (
    select(GroupTester.user_id)
    .join(ProjectMember, ProjectMember.user_id == GroupTester.user_id)
    .where(
        GroupTester.group_id == TesterGroup.id, ProjectMember.project_id == TesterGroup.project_id
    )
)
_GROUPS = (
    select(
        TesterGroup.id,
        TesterGroup.name,
        TesterGroup.created_at,
        select(func.count())
        .select_from(_MEMBERS_OF_GROUP.subquery())
        .scalar_subquery()
        .label("testers_count"),
    )
    .where(TesterGroup.project_id == bindparam("project_id"))
    .order_by(TesterGroup.id)
)
_TESTER_COLUMNS = (
    User.id.label("user_id"),
    User.email,
    User.name,
    ProjectMember.role,
    User.email_verified_at.is_not(None).label("email_verified"),
)
_EVERYONE_TESTERS = (
    select(*_TESTER_COLUMNS, ProjectMember.created_at.label("added_at"))
    .join(ProjectMember, ProjectMember.user_id == User.id)
    .where(ProjectMember.project_id == bindparam("project_id"))
    .order_by(User.email)
)
_GROUP_TESTERS = (
    select(*_TESTER_COLUMNS, GroupTester.added_at)
    .join(ProjectMember, ProjectMember.user_id == User.id)
    .join(GroupTester, GroupTester.user_id == User.id)
    .where(
        ProjectMember.project_id == bindparam("project_id"),
        GroupTester.group_id == bindparam("group_id"),
    )
    .order_by(User.email)
)
_GROUP_IDS = select(TesterGroup.id).where(
    TesterGroup.project_id == bindparam("project_id"),
    TesterGroup.id.in_(bindparam("ids", expanding=True)),
)


def _everyone(project: ProjectRecord, members: int) -> GroupRecord:
    return GroupRecord(EVERYONE, EVERYONE, members, project.created_at)


async def groups_page(
    reads: Reads, project: ProjectRecord, limit: int, after_id: str | None
) -> tuple[list[GroupRecord], str | None]:
    """The project's groups: `everyone` first (its id sorts before every other), then the
    others in the order they were made."""
    params = {"project_id": project.id, "limit": limit + 1}
    groups: list[GroupRecord] = []
    stmt = _GROUPS.limit(bindparam("limit"))
    if after_id is None:
        groups.append(_everyone(project, int(await reads.scalar(_MEMBERS_COUNT, params) or 0)))
    else:
        stmt = stmt.where(TesterGroup.id > after_id)
    groups += [
        GroupRecord(row["id"], row["name"], int(row["testers_count"]), row["created_at"])
        for row in await reads.all(stmt, params)
    ]
    return split_page(groups, limit, lambda group: group.id)


async def group_of(reads: Reads, project: ProjectRecord, group_id: str) -> GroupRecord:
    if group_id == EVERYONE:
        count = await reads.scalar(_MEMBERS_COUNT, {"project_id": project.id})
        return _everyone(project, int(count or 0))
    row = await reads.first(
        _GROUPS.where(TesterGroup.id == bindparam("group_id")),
        {"project_id": project.id, "group_id": group_id},
    )
    if row is None:
        raise group_not_found()
    return GroupRecord(row["id"], row["name"], int(row["testers_count"]), row["created_at"])


async def testers_of(reads: Reads, project: ProjectRecord, group_id: str) -> list[TesterRecord]:
    """The group's testers (members of the project), by e-mail."""
    await group_of(reads, project, group_id)  # 404 for another project's group
    stmt = _EVERYONE_TESTERS if group_id == EVERYONE else _GROUP_TESTERS
    rows = await reads.all(stmt, {"project_id": project.id, "group_id": group_id})
    return [
        TesterRecord(
            r["user_id"], r["email"], r["name"], r["role"], r["added_at"], r["email_verified"]
        )
        for r in rows
    ]


_INVITED = (
    select(InvitationGroup.group_id, Invitation.email)
    .join(Invitation, Invitation.id == InvitationGroup.invitation_id)
    .where(
        Invitation.project_id == bindparam("project_id"),
        Invitation.accepted_at.is_(None),
        Invitation.revoked_at.is_(None),
        Invitation.expires_at > bindparam("now"),
    )
    .order_by(Invitation.email)
)


async def invited_to_groups(
    reads: Reads, project: ProjectRecord, now: datetime
) -> dict[str, list[str]]:
    """Per group, the e-mails whose pending invitation will add them to it."""
    invited: dict[str, list[str]] = {}
    for row in await reads.all(_INVITED, {"project_id": project.id, "now": now}):
        invited.setdefault(row["group_id"], []).append(row["email"])
    return invited


async def check_group_ids(reads: Reads, project_id: str, group_ids: Sequence[str]) -> None:
    """422 unless every id is `everyone` or a group of the project."""
    wanted = set(group_ids) - {EVERYONE}
    if not wanted:
        return
    found = {
        row["id"]
        for row in await reads.all(_GROUP_IDS, {"project_id": project_id, "ids": list(wanted)})
    }
    if missing := sorted(wanted - found):
        raise ValidationFailed.for_field(
            "groups", f"no tester group {', '.join(missing)} in the project", code="group_not_found"
        )


# -- changing -------------------------------------------------------------------------------------


def _name_taken() -> Conflict:
    return Conflict("The project has a tester group of this name", code="group_exists")


class GroupService:
    def __init__(self, db: AsyncSession, now: datetime, invitations: InvitationService) -> None:
        self.db = db
        self.now = now
        self.invitations = invitations
        self.reads = Reads.within(db)

    async def create(self, project: ProjectRecord, name: str) -> GroupRecord:
        if name.casefold() == EVERYONE:
            raise _name_taken()
        group_id = new_id("grp")
        fields = {"id": group_id, "project_id": project.id, "name": name, "created_at": self.now}
        if not await insert_unless_present(self.db, TesterGroup, fields):
            raise _name_taken()
        return GroupRecord(group_id, name, 0, self.now)

    async def rename(self, project: ProjectRecord, group_id: str, name: str) -> GroupRecord:
        group = await self._changeable(project, group_id)
        if name.casefold() == EVERYONE:
            raise _name_taken()
        taken = await self.db.scalar(
            select(TesterGroup.id).where(
                TesterGroup.project_id == project.id,
                TesterGroup.name == name,
                TesterGroup.id != group.id,
            )
        )
        if taken is not None:
            raise _name_taken()
        await self.db.execute(
            update(TesterGroup).where(TesterGroup.id == group.id).values(name=name)
        )
        return await group_of(self.reads, project, group.id)

    async def delete(self, project: ProjectRecord, group_id: str) -> None:
        """The group goes; builds distributed to it stay with the testers they reached."""
        group = await self._changeable(project, group_id)
        await self.db.execute(delete(BuildGroup).where(BuildGroup.group_id == group.id))
        await self.db.execute(delete(TesterGroup).where(TesterGroup.id == group.id))
        applications = await self.db.execute(
            select(Application.id, Application.auto_distribute_groups).where(
                Application.project_id == project.id
            )
        )
        for application_id, groups in applications.all():
            if group.id in groups:
                await self.db.execute(
                    update(Application)
                    .where(Application.id == application_id)
                    .values(auto_distribute_groups=[g for g in groups if g != group.id])
                )

    async def add_testers(
        self, access: ProjectAccess, group_id: str, emails: Sequence[str]
    ) -> TestersAdded:
        """Members join the group; other e-mails are invited into the project as testers (an
        invitation already pending keeps its role) and join the group when they accept, as
        far as the invitation caps let (the others are in `admission.refused`)."""
        project = access.project
        group = await group_of(self.reads, project, group_id)
        wanted = list(dict.fromkeys(normal_email_text(e) for e in emails))
        members = dict(
            (
                await self.db.execute(
                    select(User.email, User.id)
                    .join(ProjectMember, ProjectMember.user_id == User.id)
                    .where(ProjectMember.project_id == project.id, User.email.in_(wanted))
                )
            ).all()
        )
        if members and not group.builtin:
            joined = await self.db.execute(
                insert_of(self.db, GroupTester)
                .values(
                    [
                        {"group_id": group.id, "user_id": user_id, "added_at": self.now}
                        for user_id in members.values()
                    ]
                )
                .on_conflict_do_nothing()  # type: ignore[attr-defined]
                .returning(GroupTester.user_id)
            )
            # Only those new to the group: one already in it may still be due a mail from a
            # distribution whose job has not run.
            await reach_builds_of_groups(
                self.db, self.now, project.id, joined.scalars().all(), [group.id]
            )
        others = [email for email in wanted if email not in members]
        invited = await self.invitations.invite_testers(access, others) if others else None
        if invited is not None and not group.builtin:
            await insert_ignoring_duplicates(
                self.db,
                InvitationGroup,
                [{"invitation_id": i, "group_id": group.id} for i in invited.invitations.values()],
            )
        testers = [t for t in await testers_of(self.reads, project, group.id) if t.email in members]
        if invited is None:
            return TestersAdded(testers, [], Admission())
        return TestersAdded(testers, list(invited.invitations), invited.admission)

    async def remove_tester(self, project: ProjectRecord, group_id: str, user_id: str) -> None:
        group = await self._changeable(project, group_id)
        removed = await self.db.execute(
            delete(GroupTester).where(
                GroupTester.group_id == group.id, GroupTester.user_id == user_id
            )
        )
        if not removed.rowcount:  # type: ignore[attr-defined]
            member = await self.db.scalar(
                select(ProjectMember.user_id).where(
                    ProjectMember.project_id == project.id, ProjectMember.user_id == user_id
                )
            )
            if member is None:
                raise NotFound("No member with this id in the project", code="member_not_found")
            raise NotFound("This member is not in the group", code="tester_not_found")

    async def _changeable(self, project: ProjectRecord, group_id: str) -> GroupRecord:
        group = await group_of(self.reads, project, group_id)
        if group.builtin:
            raise builtin_group()
        return group

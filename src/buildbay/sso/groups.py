"""Project memberships from the identity provider's groups (BUILDBAY_OIDC_GROUPS_CLAIM).

A project's admins map groups to roles (`PUT /api/projects/{id}/sso-groups`). At each sign-in
through the provider, for each project that maps groups (or where the mapping made the person a
member before), the person's role is the highest of their groups' roles there:
- not a member, and a role: added (and the membership is marked as the mapping's);
- a member the mapping added, and another role: changed; no role any more: removed;
- a member added by hand (or by an invitation): never touched; nor an owner, whoever made them.
A token without the groups claim changes nothing (a provider that stopped sending it must not
empty every project); an empty list is an answer, and removes what the mapping gave.
Owner is never a mapped role: ownership is given by an owner, by hand.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.audit.record import (
    SYSTEM,
    Actor,
    AuditAction,
    Origin,
    Target,
    record,
)
from buildbay.auth.models import User
from buildbay.db.concurrency import insert_unless_present, lock_row
from buildbay.db.reads import Reads
from buildbay.distribution.membership import leave_groups, reach_new_member
from buildbay.projects.authorization import ProjectAccess
from buildbay.projects.enums import ProjectRole
from buildbay.projects.models import Project, ProjectMember
from buildbay.projects.records import MemberRecord
from buildbay.sso.models import SsoGroupMapping, SsoMembership
from buildbay.webhooks import events as webhook_events

MAX_GROUPS_READ = 1000  # of a person's groups in the token, at most this many are looked at


@dataclass(frozen=True, slots=True)
class GroupMapping:
    group: str
    role: ProjectRole


def groups_of(claims: dict[str, Any], claim: str) -> set[str] | None:
    """The person's groups in the ID token's `claim` (a list of names, or one name); None when
    the token does not have the claim."""
    value = claims.get(claim)
    if value is None:
        return None
    if isinstance(value, str):
        return {value}
    if isinstance(value, list):
        return {g for g in value[:MAX_GROUPS_READ] if isinstance(g, str)}
    return None


async def read_mappings(reads: Reads, project_id: str) -> list[GroupMapping]:
    """A project's mapping, by group name as Python orders it (as `replace_mappings` answers):
    not the database's ORDER BY, whose collation may put `mobile` before `QA`."""
    rows = await reads.all(
        select(SsoGroupMapping.group.label("group"), SsoGroupMapping.role.label("role")).where(
            SsoGroupMapping.project_id == project_id
        )
    )
    return sorted((GroupMapping(row["group"], row["role"]) for row in rows), key=_by_group)


async def replace_mappings(
    db: AsyncSession,
    now: datetime,
    access: ProjectAccess,
    mappings: Sequence[GroupMapping],
    origin: Origin,
) -> list[GroupMapping]:
    """The project's mapping becomes `mappings` (whole: a PUT); audited with before and after.
    Memberships follow at each person's next sign-in."""
    project_id = access.project.id
    before = await read_mappings(Reads.within(db), project_id)
    await db.execute(delete(SsoGroupMapping).where(SsoGroupMapping.project_id == project_id))
    for mapping in mappings:
        db.add(
            SsoGroupMapping(
                project_id=project_id, group=mapping.group, role=mapping.role, created_at=now
            )
        )
    await db.flush()
    after = sorted(mappings, key=_by_group)
    if before != after:
        user = access.caller.user
        record(
            db,
            at=now,
            actor=Actor.user(user.id, user.email),
            action=AuditAction.SSO_GROUPS_CHANGED,
            target=Target("project", project_id, access.project.name),
            origin=origin,
            project_id=project_id,
            details={"before": _described(before), "after": _described(after)},
        )
    return after


async def apply_group_mappings(
    db: AsyncSession, now: datetime, user: User, groups: set[str], origin: Origin
) -> None:
    """The person's memberships as the projects' mappings say for `groups` (module doc)."""
    wanted: dict[str, ProjectRole] = {}
    reasons: dict[str, list[str]] = {}
    # Only the mappings of the person's groups: a project that maps none of them matters only
    # if the mapping made them a member there (read below), whatever else it maps.
    rows = (
        await db.execute(
            select(SsoGroupMapping.project_id, SsoGroupMapping.group, SsoGroupMapping.role).where(
                SsoGroupMapping.group.in_(sorted(groups))
            )
        )
        if groups
        else ()
    )
    for project_id, group, mapped_role in rows:
        reasons.setdefault(project_id, []).append(group)
        if project_id not in wanted or mapped_role.rank > wanted[project_id].rank:
            wanted[project_id] = mapped_role
    made_by_mapping = set(
        await db.scalars(select(SsoMembership.project_id).where(SsoMembership.user_id == user.id))
    )
    concerned = set(wanted) | made_by_mapping
    # As every change of a membership does (projects/service.py `_lock_members`): the
    # projects' rows first, in one order, then the memberships as committed by whoever held
    # them before. Read earlier, a role made owner by hand a moment ago would be undone.
    for project_id in sorted(concerned):
        if not await lock_row(db, Project.id, project_id):
            concerned.discard(project_id)  # deleted a moment ago
    current = {
        m.project_id: m
        for m in await db.scalars(
            select(ProjectMember).where(
                ProjectMember.user_id == user.id,
                ProjectMember.project_id.in_(concerned),
            )
        )
    }
    for project_id in sorted(concerned):
        role: ProjectRole | None = wanted.get(project_id)
        membership = current.get(project_id)
        details = {"source": "sso_groups", "groups": sorted(reasons.get(project_id, []))}
        if membership is None:
            if role is not None:
                await _add(db, now, user, project_id, role, origin, details)
            continue
        if project_id not in made_by_mapping or membership.role is ProjectRole.OWNER:
            continue  # added by hand, or an owner: the mapping never touches them
        if role is None:
            await _remove(db, now, user, membership, origin, details)
        elif role is not membership.role:
            previous = membership.role
            membership.role = role
            await db.flush()
            await webhook_events.member_role_changed(
                db, _member_record(user, membership), previous, now
            )
            _audit(db, now, AuditAction.MEMBER_ROLE_CHANGED, user, project_id, origin,
                   details | {"from": previous.value, "to": role.value})  # fmt: skip


async def _add(
    db: AsyncSession,
    now: datetime,
    user: User,
    project_id: str,
    role: ProjectRole,
    origin: Origin,
    details: dict[str, Any],
) -> None:
    fields = {"project_id": project_id, "user_id": user.id, "role": role, "created_at": now}
    if not await insert_unless_present(db, ProjectMember, fields):
        return  # added by hand at this very moment: theirs, not the mapping's
    membership = ProjectMember(**fields)
    db.add(SsoMembership(project_id=project_id, user_id=user.id, created_at=now))
    await db.flush()
    await reach_new_member(db, now, project_id, user.id, user.email)
    await webhook_events.member_added(db, _member_record(user, membership), now)
    _audit(db, now, AuditAction.MEMBER_ADDED, user, project_id, origin,
           details | {"role": role.value})  # fmt: skip


async def _remove(
    db: AsyncSession,
    now: datetime,
    user: User,
    membership: ProjectMember,
    origin: Origin,
    details: dict[str, Any],
) -> None:
    project_id = membership.project_id
    await webhook_events.member_removed(db, _member_record(user, membership), now)
    await db.execute(
        delete(SsoMembership).where(
            SsoMembership.project_id == project_id, SsoMembership.user_id == user.id
        )
    )
    await db.delete(membership)
    await db.flush()
    await leave_groups(db, project_id, user.id)
    _audit(db, now, AuditAction.MEMBER_REMOVED, user, project_id, origin,
           details | {"role": membership.role.value})  # fmt: skip


def _audit(
    db: AsyncSession,
    now: datetime,
    action: AuditAction,
    user: User,
    project_id: str,
    origin: Origin,
    details: dict[str, Any],
) -> None:
    # The server acts, by the project's mapping, at the person's sign-in.
    record(db, at=now, actor=SYSTEM, action=action, target=Target("user", user.id, user.email),
           origin=origin, project_id=project_id, subject_user_id=user.id,
           details=details)  # fmt: skip


def _member_record(user: User, membership: ProjectMember) -> MemberRecord:
    return MemberRecord(
        membership.project_id, user.id, user.email, user.name, membership.role,
        membership.created_at, user.email_verified,
    )  # fmt: skip


def _by_group(mapping: GroupMapping) -> str:
    return mapping.group


def _described(mappings: Sequence[GroupMapping]) -> list[dict[str, str]]:
    return [{"group": m.group, "role": m.role.value} for m in mappings]

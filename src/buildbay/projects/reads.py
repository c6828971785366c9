"""Projects and their members as read (db/reads.py): records and the queries that give them."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from sqlalchemy import bindparam, func, select

from buildbay.applications.models import Application
from buildbay.auth.models import User
from buildbay.db.reads import Reads, RecordOf
from buildbay.ids import split_page
from buildbay.projects.enums import ProjectRole
from buildbay.projects.models import Project, ProjectMember
from buildbay.projects.records import MemberRecord, ProjectRecord

PROJECT = RecordOf(ProjectRecord, Project)


@dataclass(frozen=True, slots=True)
class ProjectView:
    project: ProjectRecord
    applications_count: int


def _applications_count(project_id: Any) -> Any:
    """How many applications a project has (`project_id`: a value or a column)."""
    return select(func.count(Application.id)).where(Application.project_id == project_id)


# Statements are built once: composing one (and its cache key) per request costs more than
# the database takes to run it.
_APPLICATIONS_COUNT = _applications_count(bindparam("project_id"))

# The list clients poll, ordered and paged by the membership's project_id (the same value as
# projects.id): the index (user_id, project_id) then yields the page in order, with no sort.
_PROJECTS_OF_MEMBER = (
    select(
        *PROJECT.columns,
        _applications_count(Project.id).scalar_subquery().label("applications_count"),
    )
    .select_from(ProjectMember)
    .join(Project, Project.id == ProjectMember.project_id)
    .where(ProjectMember.user_id == bindparam("user_id"))
    .order_by(ProjectMember.project_id.desc())
    .limit(bindparam("limit"))
)

_MEMBERS = (
    select(
        ProjectMember.project_id,
        ProjectMember.user_id,
        User.email,
        User.name,
        ProjectMember.role,
        ProjectMember.created_at,
        User.email_verified_at.is_not(None).label("email_verified"),
    )
    .join(User, User.id == ProjectMember.user_id)
    .where(ProjectMember.project_id == bindparam("project_id"))
)
_MEMBERS_IN_ORDER = _MEMBERS.order_by(ProjectMember.created_at, User.email)
_MEMBER = _MEMBERS.where(ProjectMember.user_id == bindparam("user_id"))
_ROLES_OF_USER = select(ProjectMember.project_id, ProjectMember.role).where(
    ProjectMember.user_id == bindparam("user_id")
)


async def projects_of_member(
    reads: Reads,
    user_id: str,
    limit: int,
    after_id: str | None,
    only: Collection[str] | None = None,
) -> tuple[list[dict[str, Any]], str | None]:
    """A page of the user's projects (of those in `only`, if given: an API token's), newest
    first, each a dict of the fields of schemas.Project."""
    query = _PROJECTS_OF_MEMBER
    if only is not None:
        query = query.where(ProjectMember.project_id.in_(sorted(only)))
    if after_id is not None:
        query = query.where(ProjectMember.project_id < after_id)
    rows = await reads.all(query, {"user_id": user_id, "limit": limit + 1})
    return split_page([dict(row) for row in rows], limit, lambda row: str(row["id"]))


async def roles_of_user(reads: Reads, user_id: str) -> dict[str, ProjectRole]:
    """The user's role in each project they are a member of, by project id."""
    rows = await reads.all(_ROLES_OF_USER, {"user_id": user_id})
    return {str(row["project_id"]): ProjectRole(row["role"]) for row in rows}


async def project_view(reads: Reads, project: ProjectRecord) -> ProjectView:
    count = await reads.scalar(_APPLICATIONS_COUNT, {"project_id": project.id})
    return ProjectView(project, count or 0)


async def members(reads: Reads, project_id: str) -> list[MemberRecord]:
    """The project's members, the earliest first."""
    rows = await reads.all(_MEMBERS_IN_ORDER, {"project_id": project_id})
    return [MemberRecord(**row) for row in rows]


async def member(reads: Reads, project_id: str, user_id: str) -> MemberRecord | None:
    row = await reads.first(_MEMBER, {"project_id": project_id, "user_id": user_id})
    return None if row is None else MemberRecord(**row)


async def owned_project_named(
    reads: Reads, owner_ids: Collection[str], name: str, other_than: str | None = None
) -> ProjectRecord | None:
    """A project one of `owner_ids` owns whose name is `name` in any case (besides the project
    `other_than`): two projects an owner tells apart only by case would confuse CI's
    `--project NAME`."""
    query = (
        select(*PROJECT.columns)
        .join(ProjectMember, ProjectMember.project_id == Project.id)
        .where(
            ProjectMember.user_id.in_(sorted(owner_ids)),
            ProjectMember.role == ProjectRole.OWNER,
            func.lower(Project.name) == func.lower(name),
        )
        .limit(1)
    )
    if other_than is not None:
        query = query.where(Project.id != other_than)
    row = await reads.first(query)
    return None if row is None else PROJECT.of(row)


async def owner_ids(reads: Reads, project_id: str) -> list[str]:
    rows = await reads.all(
        select(ProjectMember.user_id).where(
            ProjectMember.project_id == project_id, ProjectMember.role == ProjectRole.OWNER
        )
    )
    return [row["user_id"] for row in rows]

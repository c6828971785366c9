"""Projects and their members."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.applications.models import Application
from buildbay.auth.models import User
from buildbay.db.engine import FastSelect, pages, read_rows
from buildbay.errors import Conflict, Forbidden, NotFound, ValidationFailed
from buildbay.ids import new_id, split_page
from buildbay.projects.access import ProjectAccess
from buildbay.projects.models import Project, ProjectMember, ProjectRole
from buildbay.storage.base import Storage


@dataclass(frozen=True, slots=True)
class ProjectView:
    project: Project
    applications_count: int


@dataclass(frozen=True, slots=True)
class MemberView:
    member: ProjectMember
    user: User


_APPLICATIONS_COUNT = FastSelect(
    select(func.count(Application.__table__.c.id).label("count")).where(
        Application.__table__.c.project_id == bindparam("project_id")
    )
)


# Built once, not per request: composing a statement costs more than SQLite takes to run it.
# Core over the tables, not ORM entities: a list only reads, and loading entities into the
# session costs several times what SQLite takes to find the rows.
# (So the count is spelled out here: an ORM attribute in the statement sends the whole list
# through the ORM's loading again.)
_projects = Project.__table__
_members = ProjectMember.__table__
_applications = Application.__table__
_projects_of_member = (
    select(
        _projects.c.id,
        _projects.c.name,
        select(func.count(_applications.c.id))
        .where(_applications.c.project_id == _projects.c.id)
        .scalar_subquery()
        .label("applications_count"),
        _projects.c.created_at,
        _projects.c.updated_at,
    )
    .select_from(_members)
    .join(_projects, _projects.c.id == _members.c.project_id)
    .where(_members.c.user_id == bindparam("user_id"))
    # Ordered and paged by the membership's project_id (the same value as projects.id): the
    # index (user_id, project_id) then yields the page in order, with no sort.
    .order_by(_members.c.project_id.desc())
    .limit(bindparam("limit"))
)
_PROJECTS_OF_MEMBER, _PROJECTS_OF_MEMBER_AFTER = pages(_projects_of_member, _members.c.project_id)


class ProjectService:
    def __init__(self, db: AsyncSession, now: datetime) -> None:
        self.db = db
        self.now = now

    async def list_for(
        self, user: User, limit: int, after_id: str | None
    ) -> tuple[list[dict[str, Any]], str | None]:
        """A page of the user's projects, each a dict of the fields of schemas.Project."""
        params = {"user_id": user.id, "limit": limit + 1}
        query = _PROJECTS_OF_MEMBER
        if after_id is not None:
            query = _PROJECTS_OF_MEMBER_AFTER
            params["after_id"] = after_id
        rows = await read_rows(self.db, query, params)
        return split_page(rows, limit, lambda row: str(row["id"]))

    async def create(self, owner: User, name: str) -> ProjectView:
        project = Project(id=new_id("prj"), name=name, created_at=self.now, updated_at=self.now)
        self.db.add(project)
        await self.db.flush()  # the project row before the membership that points at it
        self.db.add(
            ProjectMember(
                project_id=project.id, user_id=owner.id, role=ProjectRole.OWNER, created_at=self.now
            )
        )
        await self.db.flush()
        return ProjectView(project, 0)

    async def view(self, project: Project) -> ProjectView:
        rows = await read_rows(self.db, _APPLICATIONS_COUNT, {"project_id": project.id})
        return ProjectView(project, rows[0]["count"])

    async def rename(self, project: Project, name: str) -> ProjectView:
        project.name = name
        project.updated_at = self.now
        await self.db.flush()
        return await self.view(project)

    async def delete(self, project: Project, storage: Storage) -> None:
        """Rows go in one transaction (cascading to applications and builds), then the files.

        The commit comes first so that a failure can only leave orphan files, never a build
        whose bytes are gone.
        """
        await self.db.delete(project)
        await self.db.commit()
        await storage.delete_prefix(f"{project.id}/")

    # -- members ----------------------------------------------------------------------------------

    async def members(self, project: Project) -> list[MemberView]:
        rows = await self.db.execute(
            select(ProjectMember, User)
            .join(User, User.id == ProjectMember.user_id)
            .where(ProjectMember.project_id == project.id)
            .order_by(ProjectMember.created_at, User.email)
        )
        return [MemberView(member, user) for member, user in rows.all()]

    async def add_member(self, access: ProjectAccess, email: str, role: ProjectRole) -> MemberView:
        _require_owner_for_owner_role(access, role)
        user = await self.db.scalar(select(User).where(User.email == email.strip().lower()))
        if user is None:
            raise ValidationFailed.for_field(
                "email",
                "no Buildbay account has this e-mail; ask them to register first",
                code="user_not_found",
            )
        if await self.db.get(ProjectMember, (access.project.id, user.id)) is not None:
            raise Conflict("This user is already a member of the project", code="already_member")
        member = ProjectMember(
            project_id=access.project.id, user_id=user.id, role=role, created_at=self.now
        )
        self.db.add(member)
        await self.db.flush()
        return MemberView(member, user)

    async def change_role(
        self, access: ProjectAccess, user_id: str, role: ProjectRole
    ) -> MemberView:
        view = await self._member(access.project, user_id)
        if ProjectRole.OWNER in (role, view.member.role):
            _require_owner_for_owner_role(access, ProjectRole.OWNER)
        if view.member.role is ProjectRole.OWNER and role is not ProjectRole.OWNER:
            await self._ensure_another_owner(access.project, user_id)
        view.member.role = role
        await self.db.flush()
        return view

    async def remove_member(self, access: ProjectAccess, user_id: str) -> None:
        view = await self._member(access.project, user_id)
        leaving_themself = user_id == access.caller.user.id
        if not leaving_themself:
            if not access.role.includes(ProjectRole.ADMIN):
                raise Forbidden(
                    "Removing another member needs the admin role or higher",
                    code="insufficient_role",
                )
            if view.member.role is ProjectRole.OWNER:
                _require_owner_for_owner_role(access, ProjectRole.OWNER)
        if view.member.role is ProjectRole.OWNER:
            await self._ensure_another_owner(access.project, user_id)
        await self.db.delete(view.member)

    async def _member(self, project: Project, user_id: str) -> MemberView:
        row = (
            await self.db.execute(
                select(ProjectMember, User)
                .join(User, User.id == ProjectMember.user_id)
                .where(ProjectMember.project_id == project.id, ProjectMember.user_id == user_id)
            )
        ).first()
        if row is None:
            raise NotFound("No member with this user id in the project", code="member_not_found")
        return MemberView(*row)

    async def _ensure_another_owner(self, project: Project, leaving_user_id: str) -> None:
        others = await self.db.scalar(
            select(func.count())
            .select_from(ProjectMember)
            .where(
                ProjectMember.project_id == project.id,
                ProjectMember.role == ProjectRole.OWNER,
                ProjectMember.user_id != leaving_user_id,
            )
        )
        if not others:
            raise Conflict(
                "A project keeps at least one owner; make someone else owner first",
                code="last_owner",
            )


def _require_owner_for_owner_role(access: ProjectAccess, role: ProjectRole) -> None:
    if role is ProjectRole.OWNER and access.role is not ProjectRole.OWNER:
        raise Forbidden(
            "Only an owner can grant or remove the owner role", code="insufficient_role"
        )

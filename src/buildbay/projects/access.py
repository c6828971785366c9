"""Authorization, in one place: load the project (and application) a route names, check the role.

The seed's rule: an unknown project or application is 404; an existing one on which the caller has
no rights, or too low a role, is 403. Every route that takes an id depends on one of these.
"""

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Path, Request
from sqlalchemy import and_, bindparam, select

from buildbay.applications.models import Application
from buildbay.auth.dependencies import CurrentUser
from buildbay.auth.service import Principal
from buildbay.db.engine import EntityColumns, FastSelect, read_rows
from buildbay.deps import SessionDep
from buildbay.errors import Forbidden, NotFound
from buildbay.projects.models import Project, ProjectMember, ProjectRole


@dataclass(frozen=True, slots=True)
class ProjectAccess:
    project: Project
    role: ProjectRole
    caller: Principal


@dataclass(frozen=True, slots=True)
class ApplicationAccess:
    project: Project
    application: Application
    role: ProjectRole
    caller: Principal


# Built once: composing a statement (and its cache key) per request costs more than SQLite takes
# to run it, and every route that names a project runs one of these.
_MEMBERSHIP = (
    select(Project, ProjectMember.role)
    .outerjoin(
        ProjectMember,
        and_(
            ProjectMember.project_id == Project.id,
            ProjectMember.user_id == bindparam("user_id"),
        ),
    )
    .where(Project.id == bindparam("project_id"))
)
# The application in the same query: an outer join, so that a missing application still tells
# the project's existence and the caller's membership apart.
_MEMBERSHIP_AND_APPLICATION = _MEMBERSHIP.add_columns(Application).outerjoin(
    Application,
    and_(Application.project_id == Project.id, Application.id == bindparam("app_id")),
)


# The same two queries for read-only requests, as FastSelects: no ORM loading, no transaction,
# and the project and application come back as transient objects (see EntityColumns).
_projects, _members, _applications = (
    Project.__table__,
    ProjectMember.__table__,
    Application.__table__,
)
_PROJECT = EntityColumns(Project, "project_")
_APPLICATION = EntityColumns(Application, "application_")
_projects_with_role = _projects.outerjoin(
    _members,
    and_(_members.c.project_id == _projects.c.id, _members.c.user_id == bindparam("user_id")),
)
_READ_MEMBERSHIP = FastSelect(
    select(*_PROJECT.columns, _members.c.role)
    .select_from(_projects_with_role)
    .where(_projects.c.id == bindparam("project_id"))
)
_READ_MEMBERSHIP_AND_APPLICATION = FastSelect(
    select(*_PROJECT.columns, _members.c.role, *_APPLICATION.columns)
    .select_from(
        _projects_with_role.outerjoin(
            _applications,
            and_(
                _applications.c.project_id == _projects.c.id,
                _applications.c.id == bindparam("app_id"),
            ),
        )
    )
    .where(_projects.c.id == bindparam("project_id"))
)


async def membership(
    db: SessionDep, caller: Principal, project_id: str, *, read_only: bool = False
) -> tuple[Project, ProjectRole]:
    """The project and the caller's role in it: 404 if there is no such project, 403 if the
    caller is not a member. With `read_only`, the project is a transient copy."""
    params = {"user_id": caller.user.id, "project_id": project_id}
    if read_only:
        found = await read_rows(db, _READ_MEMBERSHIP, params)
        row = _of_a_member(_entities(found[0]) if found else None)
    else:
        row = _of_a_member((await db.execute(_MEMBERSHIP, params)).first())
    return row[0], row[1]


def _entities(row: dict[str, Any]) -> tuple[Project | None, ProjectRole | None, Application | None]:
    application = _APPLICATION.of_outer(row) if "application_id" in row else None
    return _PROJECT.of_outer(row), row["role"], application


def _of_a_member(row: Sequence[Any] | None) -> Sequence[Any]:
    """`row` (project, role, ...), once it names a project of which the caller is a member."""
    if row is None:
        raise NotFound("No project with this id", code="project_not_found")
    if row[1] is None:
        raise Forbidden("You are not a member of this project", code="not_a_member")
    return row


def require_role(role: ProjectRole, needed: ProjectRole) -> None:
    if not role.includes(needed):
        raise Forbidden(
            f"This needs the {needed.value} role or higher; you are {role.value}",
            code="insufficient_role",
        )


async def project_of(
    db: SessionDep,
    caller: Principal,
    project_id: str,
    needed: ProjectRole,
    *,
    read_only: bool = False,
) -> ProjectAccess:
    """The rules of `project_access`, for callers that are not routes (the web console).

    `read_only` requests (GET, HEAD) get a transient copy of the project, read without the ORM:
    such a request shows it and must not change it.
    """
    project, role = await membership(db, caller, project_id, read_only=read_only)
    require_role(role, needed)
    return ProjectAccess(project=project, role=role, caller=caller)


async def application_of(
    db: SessionDep,
    caller: Principal,
    project_id: str,
    app_id: str,
    needed: ProjectRole,
    *,
    read_only: bool = False,
) -> ApplicationAccess:
    """The rules of `application_access`, for callers that are not routes (the web console);
    `read_only` as in `project_of`."""
    # Members learn whether an application exists (404) before whether their role suffices
    # (403); strangers learn neither.
    params = {"user_id": caller.user.id, "project_id": project_id, "app_id": app_id}
    if read_only:
        found = await read_rows(db, _READ_MEMBERSHIP_AND_APPLICATION, params)
        row = _of_a_member(_entities(found[0]) if found else None)
    else:
        row = _of_a_member((await db.execute(_MEMBERSHIP_AND_APPLICATION, params)).first())
    project, role, application = row[0], row[1], row[2]
    if application is None:
        raise NotFound("No application with this id in the project", code="application_not_found")
    require_role(role, needed)
    return ApplicationAccess(project=project, application=application, role=role, caller=caller)


_READ_ONLY_METHODS = frozenset({"GET", "HEAD"})


def project_access(
    needed: ProjectRole, param: str = "id"
) -> Callable[..., Awaitable[ProjectAccess]]:
    async def dependency(
        request: Request,
        caller: CurrentUser,
        db: SessionDep,
        project_id: Annotated[str, Path(alias=param)],
    ) -> ProjectAccess:
        return await project_of(
            db, caller, project_id, needed, read_only=request.method in _READ_ONLY_METHODS
        )

    return dependency


def application_access(
    needed: ProjectRole, project_param: str = "id"
) -> Callable[..., Awaitable[ApplicationAccess]]:
    async def dependency(
        request: Request,
        caller: CurrentUser,
        db: SessionDep,
        project_id: Annotated[str, Path(alias=project_param)],
        app_id: Annotated[str, Path(alias="appId")],
    ) -> ApplicationAccess:
        read_only = request.method in _READ_ONLY_METHODS
        return await application_of(db, caller, project_id, app_id, needed, read_only=read_only)

    return dependency


ProjectTester = Annotated[ProjectAccess, Depends(project_access(ProjectRole.TESTER))]
ProjectAdmin = Annotated[ProjectAccess, Depends(project_access(ProjectRole.ADMIN))]
ProjectOwner = Annotated[ProjectAccess, Depends(project_access(ProjectRole.OWNER))]

AppTester = Annotated[ApplicationAccess, Depends(application_access(ProjectRole.TESTER))]
AppAdmin = Annotated[ApplicationAccess, Depends(application_access(ProjectRole.ADMIN))]

# The builds endpoints name the project `{projectId}` (seed: /api/app-distribution/...).
BuildsTester = Annotated[
    ApplicationAccess, Depends(application_access(ProjectRole.TESTER, "projectId"))
]
BuildsDeveloper = Annotated[
    ApplicationAccess, Depends(application_access(ProjectRole.DEVELOPER, "projectId"))
]

"""Authorization, in one place: load the project (and application) a route names, check the role.

The seed's rule: an unknown project or application is 404; an existing one on which the caller has
no rights, or too low a role, is 403. Every route that takes an id depends on one of these.
"""

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Path
from sqlalchemy import and_, select

from buildbay.applications.models import Application
from buildbay.auth.dependencies import CurrentUser
from buildbay.auth.service import Principal
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


async def membership(
    db: SessionDep, caller: Principal, project_id: str
) -> tuple[Project, ProjectRole]:
    """The project and the caller's role in it: 404 if there is no such project, 403 if the
    caller is not a member."""
    row = (
        await db.execute(
            select(Project, ProjectMember.role)
            .outerjoin(
                ProjectMember,
                and_(
                    ProjectMember.project_id == Project.id,
                    ProjectMember.user_id == caller.user.id,
                ),
            )
            .where(Project.id == project_id)
        )
    ).first()
    if row is None:
        raise NotFound("No project with this id", code="project_not_found")
    project, role = row
    if role is None:
        raise Forbidden("You are not a member of this project", code="not_a_member")
    return project, role


def require_role(role: ProjectRole, needed: ProjectRole) -> None:
    if not role.includes(needed):
        raise Forbidden(
            f"This needs the {needed.value} role or higher; you are {role.value}",
            code="insufficient_role",
        )


async def project_of(
    db: SessionDep, caller: Principal, project_id: str, needed: ProjectRole
) -> ProjectAccess:
    """The rules of `project_access`, for callers that are not routes (the web console)."""
    project, role = await membership(db, caller, project_id)
    require_role(role, needed)
    return ProjectAccess(project=project, role=role, caller=caller)


async def application_of(
    db: SessionDep, caller: Principal, project_id: str, app_id: str, needed: ProjectRole
) -> ApplicationAccess:
    """The rules of `application_access`, for callers that are not routes (the web console)."""
    # Members learn whether an application exists (404) before whether their role suffices
    # (403); strangers learn neither.
    project, role = await membership(db, caller, project_id)
    application = await db.scalar(
        select(Application).where(Application.id == app_id, Application.project_id == project_id)
    )
    if application is None:
        raise NotFound("No application with this id in the project", code="application_not_found")
    require_role(role, needed)
    return ApplicationAccess(project=project, application=application, role=role, caller=caller)


def project_access(
    needed: ProjectRole, param: str = "id"
) -> Callable[..., Awaitable[ProjectAccess]]:
    async def dependency(
        caller: CurrentUser,
        db: SessionDep,
        project_id: Annotated[str, Path(alias=param)],
    ) -> ProjectAccess:
        return await project_of(db, caller, project_id, needed)

    return dependency


def application_access(
    needed: ProjectRole, project_param: str = "id"
) -> Callable[..., Awaitable[ApplicationAccess]]:
    async def dependency(
        caller: CurrentUser,
        db: SessionDep,
        project_id: Annotated[str, Path(alias=project_param)],
        app_id: Annotated[str, Path(alias="appId")],
    ) -> ApplicationAccess:
        return await application_of(db, caller, project_id, app_id, needed)

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

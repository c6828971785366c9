from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Response, status

from buildbay.audit.record import actor_of
from buildbay.auth.dependencies import Authenticated, CurrentUser
from buildbay.deps import Context, Page, ReadsDep, TransactionRoute
from buildbay.openapi import link, linked
from buildbay.problems import problem_responses
from buildbay.projects import schemas
from buildbay.projects.access import ProjectAdmin, ProjectOwner, ProjectReader, ProjectTester
from buildbay.projects.dependencies import Service
from buildbay.projects.reads import (
    ProjectView,
    members,
    project_view,
    projects_of_member,
)
from buildbay.projects.schemas import member_schema
from buildbay.schemas import PAGE_QUERY

router = APIRouter(tags=["projects"], route_class=TransactionRoute)

BY_ID = problem_responses(401, 403, 404, 429)
# 409 name_taken: names are unique per owner (projects) and per project (applications).
WRITE_BY_ID = problem_responses(400, 401, 403, 404, 409, 413, 422, 429)

_PROJECT = "/api/projects/{id}"
_MEMBER = "/api/projects/{id}/members/{userId}"


def _project_links(project_id: str) -> dict[str, dict[str, Any]]:
    """What a project's `id` (at `project_id`, a runtime expression) opens."""
    by_id = {"id": project_id}
    return {
        "GetProject": link("GET", _PROJECT, "The project", by_id),
        "GetProjectBySeedPath": link("GET", "/api/project/{id}", "The project", by_id),
        "UpdateProject": link("PUT", _PROJECT, "Rename the project", by_id),
        "DeleteProject": link("DELETE", _PROJECT, "Delete the project", by_id),
        "ListMembers": link("GET", f"{_PROJECT}/members", "Its members", by_id),
        "AddMember": link("POST", f"{_PROJECT}/members", "Add a member", by_id),
        "ListApplications": link("GET", f"{_PROJECT}/applications", "Its applications", by_id),
        "CreateApplication": link(
            "POST", f"{_PROJECT}/applications", "Create an application in it", by_id
        ),
    }


def _member_links(user_id: str) -> dict[str, dict[str, Any]]:
    """What a member's `userId` (at `user_id`) opens, in the project of the request's path."""
    by_id = {"id": "$request.path.id", "userId": user_id}
    return {
        "UpdateMember": link("PUT", _MEMBER, "Change the member's role", by_id),
        "RemoveMember": link("DELETE", _MEMBER, "Remove the member", by_id),
    }


MemberId = Annotated[str, Path(alias="userId")]


def _project(view: ProjectView) -> schemas.Project:
    p = view.project
    return schemas.Project(
        id=p.id,
        name=p.name,
        applications_count=view.applications_count,
        created_at=p.created_at,
        updated_at=p.updated_at,
    )


@router.get(
    "/api/projects",
    responses={
        **linked(200, "A page of your projects", _project_links("$response.body#/projects/0/id")),
        **problem_responses(401, 422, 429),
    },
    summary="List your projects (an API token's only, if it names some), newest first",
    openapi_extra=PAGE_QUERY,
)
async def list_projects(caller: Authenticated, reads: ReadsDep, page: Page) -> schemas.ProjectList:
    rows, next_cursor = await projects_of_member(
        reads, caller.user.id, page.limit, page.after_id, caller.project_ids
    )
    return schemas.ProjectList.model_validate({"projects": rows, "next_cursor": next_cursor})


@router.post(
    "/api/projects",
    status_code=status.HTTP_201_CREATED,
    responses={
        **linked(201, "The new project", _project_links("$response.body#/id")),
        **problem_responses(400, 401, 403, 409, 413, 422, 429),
    },
    summary="Create a project; you become its owner (not with a limited API token)",
)
async def create_project(
    body: schemas.ProjectWrite, caller: CurrentUser, service: Service
) -> schemas.Project:
    return _project(await service.create(caller.user, body.name))


@router.get("/api/project/{id}", responses=BY_ID, summary="Get a project (the seed's path)")
@router.get("/api/projects/{id}", responses=BY_ID, summary="Get a project")
async def get_project(access: ProjectReader, reads: ReadsDep) -> schemas.Project:
    return _project(await project_view(reads, access.project))


@router.put(
    "/api/projects/{id}",
    responses={
        **linked(200, "The renamed project", _project_links("$response.body#/id")),
        **WRITE_BY_ID,
    },
    summary="Rename a project (admin+)",
)
async def update_project(
    body: schemas.ProjectWrite, access: ProjectAdmin, service: Service
) -> schemas.Project:
    return _project(await service.rename(access.project, body.name, by=actor_of(access)))


@router.delete(
    "/api/projects/{id}",
    status_code=status.HTTP_204_NO_CONTENT,
    responses=BY_ID,
    summary="Delete a project with its applications, builds and files (owner)",
)
async def delete_project(access: ProjectOwner, service: Service, ctx: Context) -> Response:
    await service.delete(access.project, ctx.storage, by=actor_of(access))
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get(
    "/api/projects/{id}/members",
    responses={
        # The first member listed: the owner who created the project, until someone changes it.
        **linked(200, "The project's members", _member_links("$response.body#/members/0/userId")),
        **BY_ID,
    },
    summary="List a project's members",
)
async def list_members(access: ProjectReader, reads: ReadsDep) -> schemas.MemberList:
    found = await members(reads, access.project.id)
    return schemas.MemberList(members=[member_schema(member) for member in found])


@router.post(
    "/api/projects/{id}/members",
    status_code=status.HTTP_201_CREATED,
    responses={
        **linked(201, "The new member", _member_links("$response.body#/userId")),
        **problem_responses(400, 401, 403, 404, 409, 413, 422, 429),
    },
    summary="Add a registered user to the project (admin+; owner to grant owner)",
)
async def add_member(
    body: schemas.MemberCreate, access: ProjectAdmin, service: Service
) -> schemas.Member:
    return member_schema(await service.add_member(access, str(body.email), body.role))


@router.put(
    "/api/projects/{id}/members/{userId}",
    responses=problem_responses(400, 401, 403, 404, 409, 413, 422, 429),
    summary="Change a member's role (admin+; owner to grant or remove owner)",
)
async def update_member(
    body: schemas.MemberUpdate, user_id: MemberId, access: ProjectAdmin, service: Service
) -> schemas.Member:
    return member_schema(await service.change_role(access, user_id, body.role))


@router.delete(
    "/api/projects/{id}/members/{userId}",
    status_code=status.HTTP_204_NO_CONTENT,
    responses=problem_responses(401, 403, 404, 409, 429),
    summary="Remove a member (admin+, or the member themself)",
)
async def remove_member(user_id: MemberId, access: ProjectTester, service: Service) -> Response:
    await service.remove_member(access, user_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response, status

from buildbay.applications import schemas
from buildbay.applications.dependencies import Service
from buildbay.applications.reads import application_view, applications_page
from buildbay.applications.schemas import application_schema
from buildbay.applications.service import RENAMED, rename_warning
from buildbay.audit.record import actor_of
from buildbay.builds.retention import preview as retention_preview
from buildbay.deps import Context, Page, ReadsDep, TransactionRoute
from buildbay.openapi import link, linked
from buildbay.problems import problem_responses
from buildbay.projects.access import AppAdmin, AppReader, ProjectAdmin, ProjectReader
from buildbay.projects.authorization import tester_of
from buildbay.schemas import PAGE_QUERY

router = APIRouter(
    prefix="/api/projects/{id}/applications", tags=["applications"], route_class=TransactionRoute
)

BY_ID = problem_responses(401, 403, 404, 429)
# 409 name_taken: names are unique per owner (projects) and per project (applications).
WRITE_BY_ID = problem_responses(400, 401, 403, 404, 409, 413, 422, 429)

_APPLICATION = "/api/projects/{id}/applications/{appId}"
_BUILDS = "/api/app-distribution/{projectId}/{appId}/builds"


def _application_links(app: str) -> dict[str, dict[str, Any]]:
    """What an application (at `app`, a runtime expression to its object) opens."""
    by_id = {"id": f"{app}/projectId", "appId": f"{app}/id"}
    builds = {"projectId": f"{app}/projectId", "appId": f"{app}/id"}
    return {
        "GetApplication": link("GET", _APPLICATION, "The application", by_id),
        "UpdateApplication": link("PUT", _APPLICATION, "Update the application", by_id),
        "DeleteApplication": link("DELETE", _APPLICATION, "Delete the application", by_id),
        "ListBuilds": link("GET", _BUILDS, "Its builds", builds),
        "LatestBuild": link("GET", f"{_BUILDS}/latest", "Its newest ready build", builds),
        "CreateUploadLink": link(
            "POST", f"{_BUILDS}/upload-link", "Upload a build (step 1)", builds
        ),
    }


@router.get(
    "",
    responses={
        **linked(
            200, "A page of applications", _application_links("$response.body#/applications/0")
        ),
        **problem_responses(401, 403, 404, 422, 429),
    },
    summary="List applications",
    openapi_extra=PAGE_QUERY,
)
async def list_applications(
    access: ProjectReader, reads: ReadsDep, page: Page
) -> schemas.ApplicationList:
    views, next_cursor = await applications_page(
        reads, access.project.id, page.limit, page.after_id, tester_of(access)
    )
    return schemas.ApplicationList(
        applications=[application_schema(v, access.role) for v in views], next_cursor=next_cursor
    )


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    responses={
        **linked(201, "The new application", _application_links("$response.body#")),
        **WRITE_BY_ID,
    },
    summary="Create an application (admin+)",
)
async def create_application(
    body: schemas.ApplicationCreate, access: ProjectAdmin, service: Service
) -> schemas.Application:
    view = await service.create(access.project, body.model_dump(), by=actor_of(access))
    return application_schema(view, access.role)


@router.get("/{appId}", responses=BY_ID, summary="Get an application")
async def get_application(access: AppReader, reads: ReadsDep) -> schemas.Application:
    view = await application_view(reads, access.application, tester_of(access))
    return application_schema(view, access.role)


@router.put(
    "/{appId}",
    responses={
        **linked(200, "The updated application", _application_links("$response.body#")),
        **WRITE_BY_ID,
    },
    summary="Update an application's fields (admin+)",
)
async def update_application(
    body: schemas.ApplicationUpdate, access: AppAdmin, service: Service
) -> schemas.ApplicationUpdated:
    changes = body.model_dump(exclude_unset=True)
    view = await service.update(access.application, changes, by=actor_of(access))
    warning = rename_warning(access.application, view.application)
    return schemas.ApplicationUpdated(
        **dict(application_schema(view, access.role)),
        warnings=[schemas.ApplicationWarning(code=RENAMED, detail=warning)] if warning else [],
    )


@router.post(
    "/{appId}/retention/preview",
    responses=problem_responses(400, 401, 403, 404, 413, 422, 429),
    summary="Which ready builds a retention rule would delete now; changes nothing (admin+)",
)
async def preview_retention(
    body: schemas.RetentionRule, access: AppAdmin, reads: ReadsDep, ctx: Context
) -> schemas.RetentionPreview:
    policy = schemas.retention_policy(body)
    doomed = await retention_preview(reads, access.application.id, policy, ctx.clock.now())
    return schemas.retention_preview_schema(doomed)


@router.post(
    "/{appId}/update-key",
    responses={
        **linked(
            200, "The application with its new update key", _application_links("$response.body#")
        ),
        **BY_ID,
    },
    summary="Rotate the update key; the old one keeps answering for 7 days (admin+)",
)
async def rotate_update_key(access: AppAdmin, service: Service) -> schemas.Application:
    return application_schema(await service.rotate_update_key(access.application), access.role)


@router.delete(
    "/{appId}",
    status_code=status.HTTP_204_NO_CONTENT,
    responses=BY_ID,
    summary="Delete an application with its builds and files (admin+)",
)
async def delete_application(access: AppAdmin, service: Service, ctx: Context) -> Response:
    await service.delete(access.application, ctx.storage, by=actor_of(access))
    return Response(status_code=status.HTTP_204_NO_CONTENT)

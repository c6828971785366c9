from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Response, status
from fastapi.responses import RedirectResponse

from buildbay.builds import schemas
from buildbay.builds.models import Build, BuildStatus
from buildbay.builds.service import BuildService, VersionFilter
from buildbay.deps import Context, SessionDep, TransactionRoute
from buildbay.errors import problem_responses
from buildbay.projects.access import BuildsDeveloper, BuildsTester
from buildbay.schemas import PAGE_QUERY, Page

router = APIRouter(
    prefix="/api/app-distribution/{projectId}/{appId}/builds",
    tags=["builds"],
    route_class=TransactionRoute,
)

BY_ID = problem_responses(401, 403, 404, 429)


async def version_filter(
    version_name: Annotated[
        str | None,
        Query(
            alias="versionName",
            max_length=100,
            description="Only builds of this version name (APK versionName, IPA shortVersion)",
        ),
    ] = None,
    version_code: Annotated[
        str | None,
        Query(
            alias="versionCode",
            max_length=100,
            description="Only builds of this version code (APK versionCode, IPA buildNumber)",
        ),
    ] = None,
) -> VersionFilter:
    return VersionFilter(version_name, version_code)


Version = Annotated[VersionFilter, Depends(version_filter)]
BuildId = Annotated[str, Path(alias="buildId")]


async def build_service(ctx: Context, db: SessionDep) -> BuildService:
    return BuildService(db, ctx.clock.now(), ctx.settings, ctx.storage)


Service = Annotated[BuildService, Depends(build_service)]


def to_schema(build: Build, public_url: str) -> schemas.Build:
    download_url = None
    if build.status is BuildStatus.READY:
        download_url = (
            f"{public_url}/api/app-distribution/{build.project_id}/{build.application_id}"
            f"/builds/{build.id}/download"
        )
    return schemas.Build(
        build_id=build.id,
        project_id=build.project_id,
        application_id=build.application_id,
        file_name=build.file_name,
        file_size=build.file_size,
        sha256=build.sha256,
        status=build.status,
        notes=build.notes,
        created_at=build.created_at,
        verified_at=build.verified_at,
        expires_at=build.expires_at,
        uploaded_by=build.uploaded_by,
        metadata=build.metadata_,
        metadata_error=build.metadata_error,
        download_url=download_url,
    )


@router.get(
    "",
    responses=problem_responses(401, 403, 404, 422, 429),
    summary="List builds, newest first",
    openapi_extra=PAGE_QUERY,
)
async def list_builds(
    access: BuildsTester,
    service: Service,
    ctx: Context,
    page: Page,
    version: Version,
    status: Annotated[BuildStatus | None, Query(description="Only builds in this state")] = None,
) -> schemas.BuildList:
    builds, next_cursor = await service.list(
        access.application, status, page.limit, page.after_id, version
    )
    public_url = ctx.settings.resolved_public_url
    return schemas.BuildList(
        builds=[to_schema(b, public_url) for b in builds], next_cursor=next_cursor
    )


@router.post(
    "/upload-link",
    status_code=status.HTTP_201_CREATED,
    responses=problem_responses(400, 401, 403, 404, 413, 422, 429),
    summary="Step 1: get an address to PUT the build file to (developer+)",
)
async def create_upload_link(
    body: schemas.UploadLinkRequest, access: BuildsDeveloper, service: Service
) -> schemas.UploadLink:
    build, target = await service.create_upload_link(
        access.application, access.caller.user, body.file_name, body.file_size, body.sha256
    )
    return schemas.UploadLink(
        upload_url=target.url,
        build_id=build.id,
        expires_at=build.expires_at,
        upload_method="PUT",
        upload_headers=target.headers,
    )


@router.post(
    "/verify",
    responses=problem_responses(400, 401, 403, 404, 413, 422, 429),
    summary="Step 3: confirm the upload; the build becomes ready (developer+)",
)
async def verify_upload(
    body: schemas.VerifyRequest, access: BuildsDeveloper, service: Service, ctx: Context
) -> schemas.Build:
    build = await service.verify(access.application, body.build_id, body.notes)
    return to_schema(build, ctx.settings.resolved_public_url)


@router.get(
    "/latest",
    responses=problem_responses(401, 403, 404, 422, 429),
    summary="The newest ready build (of a version, if asked): a stable address for CI",
)
async def latest_build(
    access: BuildsTester,
    service: Service,
    ctx: Context,
    version: Version,
) -> schemas.Build:
    build = await service.latest(access.application, version)
    return to_schema(build, ctx.settings.resolved_public_url)


# After /latest: a path parameter would take that word for a build id.
@router.get("/{buildId}", responses=BY_ID, summary="Get a build")
async def get_build(
    build_id: BuildId, access: BuildsTester, service: Service, ctx: Context
) -> schemas.Build:
    build = await service.get(access.application, build_id)
    return to_schema(build, ctx.settings.resolved_public_url)


@router.get(
    "/{buildId}/download",
    status_code=status.HTTP_302_FOUND,
    response_class=RedirectResponse,
    responses={
        302: {"description": "Redirect to a short-lived signed address of the file"},
        **problem_responses(401, 403, 404, 409, 429),
    },
    summary="Download a ready build (tester+): 302 to a short-lived signed URL",
)
async def download_build(
    build_id: BuildId, access: BuildsTester, service: Service
) -> RedirectResponse:
    url = await service.download_url(access.application, build_id)
    return RedirectResponse(url, status_code=status.HTTP_302_FOUND)


@router.delete(
    "/{buildId}",
    status_code=status.HTTP_204_NO_CONTENT,
    responses=BY_ID,
    summary="Delete a build and its file (developer+)",
)
async def delete_build(build_id: BuildId, access: BuildsDeveloper, service: Service) -> Response:
    await service.delete(access.application, build_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)

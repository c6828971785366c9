"""The console: an application's page, its builds, install links and the browser upload
(JSON, answered with problem+json when refused)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse, RedirectResponse
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.builds.install import InstallLinkReads, InstallLinks
from buildbay.builds.reads import BuildOrder, BuildReads
from buildbay.builds.schemas import (
    DEFAULT_HOURS,
    MAX_NOTES_LENGTH,
    PartsRequest,
    UploadLinkRequest,
    VerifyRequest,
    version_label,
)
from buildbay.builds.service import BuildService, human_size
from buildbay.console.pages import (
    ConsoleRoute,
    can,
    json_body,
    page,
    read_json,
    see_other,
    visit,
)
from buildbay.db.reads import Reads
from buildbay.deps import get_context
from buildbay.projects.authorization import application_of
from buildbay.projects.models import ProjectRole
from buildbay.projects.reads import members
from buildbay.storage.base import parts_count

router = APIRouter(route_class=ConsoleRoute, include_in_schema=False)


def _build_service(request: Request, db: AsyncSession) -> BuildService:
    return BuildService.of(get_context(request), db)


def _links(request: Request, db: AsyncSession) -> InstallLinks:
    return InstallLinks.of(get_context(request), db)


def _build_reads(request: Request, db: AsyncSession) -> BuildReads:
    return BuildReads.of(get_context(request), Reads.within(db))


@router.get("/projects/{project_id}/apps/{app_id}")
async def application_page(request: Request, project_id: str, app_id: str) -> Response:
    visitor, db = await visit(request)
    reads = Reads.within(db)
    access = await application_of(reads, visitor.principal, project_id, app_id, ProjectRole.TESTER)
    builds, _ = await BuildReads.of(get_context(request), reads).page(
        access.application.id, None, 100, None, None, BuildOrder.NEWEST
    )
    links = InstallLinkReads.of(get_context(request), reads)
    current = await links.current([b.id for b in builds])
    uploaders = {m.user_id: m for m in await members(reads, access.project.id)}
    fresh = request.query_params.get("link")
    return page(
        "console/application.html", visitor, project=access.project,
        application=access.application, role=access.role, can=can(access.role),
        builds=builds, install_urls={k: links.url(v) for k, v in current.items()},
        install_expiry={k: v.expires_at for k, v in current.items()},
        uploaders=uploaders, human_size=human_size, version_label=version_label, fresh_link=fresh,
        max_notes=MAX_NOTES_LENGTH,
    )  # fmt: skip


def _build_path(project_id: str, app_id: str) -> str:
    return f"/projects/{project_id}/apps/{app_id}"


@router.post("/projects/{project_id}/apps/{app_id}/builds/{build_id}/delete")
async def delete_build(request: Request, project_id: str, app_id: str, build_id: str) -> Response:
    visitor, db = await visit(request)
    access = await application_of(
        Reads.within(db), visitor.principal, project_id, app_id, ProjectRole.DEVELOPER
    )
    await _build_service(request, db).delete(access.application, build_id)
    return see_other(_build_path(project_id, app_id))


@router.get("/projects/{project_id}/apps/{app_id}/builds/{build_id}/download")
async def download_build(request: Request, project_id: str, app_id: str, build_id: str) -> Response:
    visitor, db = await visit(request)
    access = await application_of(
        Reads.within(db), visitor.principal, project_id, app_id, ProjectRole.TESTER
    )
    url = await _build_reads(request, db).download_url(access.application.id, build_id)
    return RedirectResponse(url, status_code=302)


@router.post("/projects/{project_id}/apps/{app_id}/builds/{build_id}/install-link")
async def create_install_link(
    request: Request, project_id: str, app_id: str, build_id: str
) -> Response:
    visitor, db = await visit(request)
    access = await application_of(
        Reads.within(db), visitor.principal, project_id, app_id, ProjectRole.TESTER
    )
    build = await _build_reads(request, db).get(access.application.id, build_id)
    await _links(request, db).share(build, visitor.principal.user, DEFAULT_HOURS)
    return see_other(f"{_build_path(project_id, app_id)}?link={build.id}#build-{build.id}")


# The browser's upload: it asks for the address here, PUTs the file there itself (with a
# progress bar), then asks for verify here. JSON, with the CSRF token in a header.


@router.post("/projects/{project_id}/apps/{app_id}/uploads")
async def start_upload(request: Request, project_id: str, app_id: str) -> Response:
    visitor, db = await visit(request)
    access = await application_of(
        Reads.within(db), visitor.principal, project_id, app_id, ProjectRole.DEVELOPER
    )
    body = json_body(UploadLinkRequest, await read_json(request))
    build, target = await _build_service(request, db).create_upload_link(
        access.application,
        visitor.principal.user,
        body.file_name,
        body.file_size,
        None,
        body.multipart,
    )
    plan = None
    if build.part_size is not None:
        plan = {
            "partSize": build.part_size,
            "partsCount": parts_count(build.file_size, build.part_size),
        }
    return JSONResponse(
        {
            "buildId": build.id,
            "uploadUrl": target.url if target else None,
            "uploadHeaders": target.headers if target else {},
            "multipart": plan,
        },
        status_code=201,
    )


@router.post("/projects/{project_id}/apps/{app_id}/uploads/{build_id}/parts")
async def upload_part_targets(
    request: Request, project_id: str, app_id: str, build_id: str
) -> Response:
    """Addresses for parts of a large file the browser sends in parts."""
    visitor, db = await visit(request)
    access = await application_of(
        Reads.within(db), visitor.principal, project_id, app_id, ProjectRole.DEVELOPER
    )
    body = json_body(PartsRequest, await read_json(request))
    targets = await _build_service(request, db).part_targets(
        access.application, build_id, body.part_numbers
    )
    return JSONResponse(
        {"parts": [{"partNumber": t.number, "url": t.target.url, "headers": t.target.headers}
                   for t in targets]}
    )  # fmt: skip


@router.post("/projects/{project_id}/apps/{app_id}/uploads/{build_id}/verify")
async def finish_upload(request: Request, project_id: str, app_id: str, build_id: str) -> Response:
    visitor, db = await visit(request)
    access = await application_of(
        Reads.within(db), visitor.principal, project_id, app_id, ProjectRole.DEVELOPER
    )
    data = await read_json(request)
    notes = (data.get("notes") or None) if isinstance(data, dict) else None
    body = json_body(VerifyRequest, {"buildId": build_id, "notes": notes})
    build = await _build_service(request, db).verify(access.application, build_id, body.notes)
    return JSONResponse({"buildId": build.id, "status": build.status.value})

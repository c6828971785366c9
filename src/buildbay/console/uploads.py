"""The console's browser upload, JSON for the page's script: it asks for the address here, PUTs
the file there itself (with a progress bar), then asks for verify here. The CSRF token comes in
a header; a refusal is problem+json, as the API's (ConsoleJsonRoute)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from buildbay.audit.record import actor_of
from buildbay.builds.dependencies import build_service
from buildbay.builds.schemas import PartsRequest, UploadLinkRequest, VerifyRequest
from buildbay.console.pages import ConsoleJsonRoute, json_body, read_json, visit_application
from buildbay.deps import get_context
from buildbay.projects.enums import ProjectRole
from buildbay.storage.base import parts_count

router = APIRouter(route_class=ConsoleJsonRoute, include_in_schema=False)


@router.post("/projects/{project_id}/apps/{app_id}/uploads")
async def start_upload(request: Request, project_id: str, app_id: str) -> Response:
    visitor, db, access = await visit_application(
        request, project_id, app_id, ProjectRole.DEVELOPER
    )
    body = json_body(UploadLinkRequest, await read_json(request))
    build, target = await build_service(get_context(request), db).create_upload_link(
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
    _, db, access = await visit_application(request, project_id, app_id, ProjectRole.DEVELOPER)
    body = json_body(PartsRequest, await read_json(request))
    targets = await build_service(get_context(request), db).part_targets(
        access.application, build_id, body.part_numbers
    )
    return JSONResponse(
        {"parts": [{"partNumber": t.number, "url": t.target.url, "headers": t.target.headers}
                   for t in targets]}
    )  # fmt: skip


@router.post("/projects/{project_id}/apps/{app_id}/uploads/{build_id}/verify")
async def finish_upload(request: Request, project_id: str, app_id: str, build_id: str) -> Response:
    _, db, access = await visit_application(request, project_id, app_id, ProjectRole.DEVELOPER)
    data = await read_json(request)
    sent = data if isinstance(data, dict) else {}
    body = json_body(
        VerifyRequest,
        {"buildId": build_id, "notes": sent.get("notes") or None,
         "channels": sent.get("channels"), "mandatory": sent.get("mandatory", False)},
    )  # fmt: skip
    build = await build_service(get_context(request), db).verify(
        access.application, build_id, body.notes, body.channels, body.mandatory,
        by=actor_of(access),
    )  # fmt: skip
    return JSONResponse({"buildId": build.id, "status": build.status.value})

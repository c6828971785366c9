"""A project's devices, for its developers: the list, the file Apple's device upload takes, and
which devices a build installs on (docs/api.md, "Testers' devices")."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Query
from fastapi.responses import StreamingResponse

from buildbay.builds.dependencies import Builds
from buildbay.deps import Context, Page, ReadsDep, TransactionRoute
from buildbay.devices import project_schemas as schemas
from buildbay.devices.export import DeviceFileFormat, device_file, download_headers
from buildbay.devices.reach import profile_scope, reach_counts, reach_page
from buildbay.devices.reads import MAX_SEARCH, ListedDevice, project_devices
from buildbay.devices.records import DeviceRecord, DeviceTester, ProfileScope
from buildbay.problems import problem_responses
from buildbay.projects.access import BuildsDeveloperReader, ProjectDeveloperReader
from buildbay.schemas import NO_NUL_PATTERN, PAGE_QUERY

router = APIRouter(tags=["devices"], route_class=TransactionRoute)

_DEVICES = "/api/projects/{id}/devices"
BuildId = Annotated[str, Path(alias="buildId")]
_PROFILE_TYPES = frozenset({"ad-hoc", "development", "enterprise", "app-store"})


def tester_schema(tester: DeviceTester) -> schemas.DeviceTester:
    return schemas.DeviceTester(id=tester.id, email=tester.email, name=tester.name)


def _device_fields(device: DeviceRecord, tester: DeviceTester) -> dict[str, Any]:
    return {
        "id": device.id,
        "udid": device.udid,
        "name": device.name,
        "model": device.model,
        "os_version": device.os_version,
        "platform": device.platform,
        "serial": device.serial,
        "tester_id": device.user_id,
        "enrolled_at": device.enrolled_at,
        "last_seen_at": device.last_seen_at,
        "tester": tester_schema(tester),
    }


def tester_device_schema(device: DeviceRecord, tester: DeviceTester) -> schemas.TesterDevice:
    return schemas.TesterDevice(**_device_fields(device, tester))


def _project_device(listed: ListedDevice, builds: dict[str, str]) -> schemas.ProjectDevice:
    inclusions = {
        app_id: None
        if app_id not in builds
        else schemas.ProfileInclusion(
            application_id=app_id, build_id=builds[app_id], included=included
        )
        for app_id, included in listed.in_profile.items()
    }
    return schemas.ProjectDevice(
        **_device_fields(listed.device, listed.tester), in_profile_of_latest=inclusions
    )


@router.get(
    _DEVICES,
    responses=problem_responses(401, 403, 404, 422, 429),
    summary="List the devices the project's members enrolled, the most recent first (developer+)",
    openapi_extra=PAGE_QUERY,
)
async def list_project_devices(
    access: ProjectDeveloperReader,
    reads: ReadsDep,
    page: Page,
    q: Annotated[
        str | None,
        Query(
            max_length=MAX_SEARCH,
            pattern=NO_NUL_PATTERN,
            description="Only devices whose name, model or UDID, or whose tester's e-mail or "
            "name, hold this text (in any case)",
        ),
    ] = None,
) -> schemas.ProjectDeviceList:
    found = await project_devices(
        reads, access.project.id, page.limit, page.after_id, (q or "").strip() or None
    )
    builds = {a.application_id: a.build_id for a in found.applications if a.build_id}
    return schemas.ProjectDeviceList(
        devices=[_project_device(listed, builds) for listed in found.devices],
        applications=[
            schemas.LatestProfile(
                application_id=a.application_id, name=a.application_name, build_id=a.build_id
            )
            for a in found.applications
        ],
        next_cursor=found.next_cursor,
    )


@router.get(
    f"{_DEVICES}/export",
    response_class=StreamingResponse,
    responses={
        200: {
            "description": "`apple`: the tab-separated file Apple's Register Multiple Devices "
            "upload takes; `csv`: every device field and its tester, RFC 4180",
            "content": {
                "text/tab-separated-values": {"schema": {"type": "string"}},
                "text/csv": {"schema": {"type": "string"}},
            },
        },
        **problem_responses(401, 403, 404, 422, 429),
    },
    summary="Download the project's devices for Apple's device upload, or as CSV (developer+)",
)
async def export_project_devices(
    access: ProjectDeveloperReader,
    reads: ReadsDep,
    ctx: Context,
    format: Annotated[  # noqa: A002 - the query parameter's name
        DeviceFileFormat,
        Query(description="`apple` (the default): Apple's device upload file; `csv`"),
    ] = DeviceFileFormat.APPLE,
) -> StreamingResponse:
    project = access.project
    chunks = await device_file(reads, ctx.read_engine, project.id, format)
    headers = download_headers(project.name, project.id, format)
    return StreamingResponse(chunks, media_type=format.media_type, headers=headers)


@router.get(
    "/api/app-distribution/{projectId}/{appId}/builds/{buildId}/devices",
    responses=problem_responses(401, 403, 404, 422, 429),
    summary="Which enrolled devices of the project's members the build installs on (developer+)",
    openapi_extra=PAGE_QUERY,
)
async def build_devices(
    build_id: BuildId,
    access: BuildsDeveloperReader,
    builds: Builds,
    page: Page,
    only: Annotated[
        Literal["included", "missing"] | None,
        Query(description="Only the devices the profile lists (`included`), or misses"),
    ] = None,
) -> schemas.BuildDevices:
    build = await builds.get(access.application.id, build_id)
    scope = profile_scope(build.file_name, build.metadata_)
    provisioning = (build.metadata_ or {}).get("provisioning")
    kind = provisioning.get("type") if isinstance(provisioning, dict) else None
    profile_type = kind if kind in _PROFILE_TYPES and scope is not None else None
    counts = None
    if scope is ProfileScope.LISTED:
        counts = await reach_counts(builds.reads, access.project.id, build.id)
        if counts is None:  # verified before devices were: its UDIDs were not kept
            scope = ProfileScope.UNKNOWN
    if counts is None:
        return schemas.BuildDevices(
            build_id=build.id, scope=scope, profile_type=profile_type, included_count=None,
            missing_count=None, testers_unable_count=None, included=[], missing=[],
            next_cursor=None,
        )  # fmt: skip
    wanted = None if only is None else only == "included"
    found, next_cursor = await reach_page(
        builds.reads, access.project.id, build.id, page.limit, page.after_id, wanted
    )
    return schemas.BuildDevices(
        build_id=build.id,
        scope=scope,
        profile_type=profile_type,
        included_count=counts.included,
        missing_count=counts.missing,
        testers_unable_count=counts.testers_unable,
        included=[tester_device_schema(r.device, r.tester) for r in found if r.included],
        missing=[tester_device_schema(r.device, r.tester) for r in found if not r.included],
        next_cursor=next_cursor,
    )

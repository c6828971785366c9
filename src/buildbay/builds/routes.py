from __future__ import annotations

import tempfile
from typing import IO, Annotated, Any

from fastapi import APIRouter, Body, Depends, Path, Query, Request, Response, status
from fastapi.responses import JSONResponse, RedirectResponse

from buildbay.audit.record import actor_of
from buildbay.builds import schemas
from buildbay.builds.blockmap import MAX_BLOCKMAP_BYTES
from buildbay.builds.dependencies import Builds, LinkReads, Links, Service
from buildbay.builds.devices import is_ios_build
from buildbay.builds.duplicates import same_version_warning
from buildbay.builds.enums import BuildStatus
from buildbay.builds.extras import NONE as NO_EXTRAS
from buildbay.builds.extras import build_extras
from buildbay.builds.install import InstallLinkReads, ListedLink
from buildbay.builds.reads import (
    ICON_CACHE,
    BuildOrder,
    BuildQuery,
    ShownBuild,
    SourceFilter,
    VersionFilter,
)
from buildbay.builds.records import BuildRecord
from buildbay.builds.release import Distribution, Verify, verify_and_release
from buildbay.builds.schemas import build_schema as to_schema
from buildbay.builds.source import COMMIT_PREFIX_MIN, REF_MAX
from buildbay.deps import Context, Page, TransactionRoute
from buildbay.distribution.dependencies import distributor
from buildbay.errors import BadRequest, PayloadTooLarge
from buildbay.numbers import whole_number
from buildbay.openapi import link, linked
from buildbay.problems import problem_responses
from buildbay.projects.access import (
    BuildsDeveloper,
    BuildsDownloader,
    BuildsReader,
    BuildsUploader,
    InstallLinksReader,
)
from buildbay.projects.authorization import tester_of as tester
from buildbay.schemas import NO_NUL_PATTERN, PAGE_QUERY
from buildbay.storage.base import parts_count

router = APIRouter(
    prefix="/api/app-distribution/{projectId}/{appId}/builds",
    tags=["builds"],
    route_class=TransactionRoute,
)

BY_ID = problem_responses(401, 403, 404, 429)

_BUILDS = "/api/app-distribution/{projectId}/{appId}/builds"
_BUILD = f"{_BUILDS}/{{buildId}}"


def _build_links(build: str) -> dict[str, dict[str, Any]]:
    """What a build (at `build`, a runtime expression to its object) opens."""
    by_id = {
        "projectId": f"{build}/projectId",
        "appId": f"{build}/applicationId",
        "buildId": f"{build}/buildId",
    }
    return {
        "GetBuild": link("GET", _BUILD, "The build", by_id),
        "DownloadBuild": link("GET", f"{_BUILD}/download", "Download its file", by_id),
        "BuildIcon": link("GET", f"{_BUILD}/icon", "Its app icon", by_id),
        "CreateInstallLink": link("POST", f"{_BUILD}/install-link", "Share it", by_id),
        "ListInstallLinks": link("GET", f"{_BUILD}/install-links", "Its install links", by_id),
        "DeleteBuild": link("DELETE", _BUILD, "Delete the build", by_id),
    }


_IN_PATH = {"projectId": "$request.path.projectId", "appId": "$request.path.appId"}
_UPLOAD_LINKS = {
    "VerifyUpload": link(
        "POST",
        f"{_BUILDS}/verify",
        "Step 3, once the file is PUT to uploadUrl",
        _IN_PATH,
        request_body={"buildId": "$response.body#/buildId"},
    ),
    "GetBuild": link(
        "GET", _BUILD, "The pending build", {**_IN_PATH, "buildId": "$response.body#/buildId"}
    ),
    "DeleteBuild": link(
        "DELETE",
        _BUILD,
        "Give up the upload",
        {**_IN_PATH, "buildId": "$response.body#/buildId"},
    ),
}
_INSTALL_LINK_LINKS = {
    "RevokeInstallLink": link(
        "DELETE",
        f"{_BUILD}/install-links/{{linkId}}",
        "Revoke the install link",
        {**_IN_PATH, "buildId": "$request.path.buildId", "linkId": "$response.body#/linkId"},
    ),
}


async def version_filter(
    version_name: Annotated[
        str | None,
        Query(
            alias="versionName",
            max_length=100,
            pattern=NO_NUL_PATTERN,
            description="Only builds of this version name (APK versionName, IPA shortVersion)",
        ),
    ] = None,
    version_code: Annotated[
        str | None,
        Query(
            alias="versionCode",
            max_length=100,
            pattern=NO_NUL_PATTERN,
            description="Only builds of this version code (APK versionCode, IPA buildNumber)",
        ),
    ] = None,
) -> VersionFilter | None:
    """The version asked for; None if neither was."""
    if version_name is None and version_code is None:
        return None
    return VersionFilter(version_name, version_code)


Version = Annotated[VersionFilter | None, Depends(version_filter)]


async def source_filter(
    branch: Annotated[
        str | None,
        Query(
            max_length=REF_MAX,
            pattern=NO_NUL_PATTERN,
            description="Only builds of this branch (verify's `source.branch`, exactly)",
        ),
    ] = None,
    commit: Annotated[
        str | None,
        Query(
            pattern=f"^[0-9a-fA-F]{{{COMMIT_PREFIX_MIN},64}}$",
            description="Only builds of this commit (`source.commit`): its hash, or the first "
            "7 or more hex digits of it",
        ),
    ] = None,
) -> SourceFilter | None:
    if branch is None and commit is None:
        return None
    return SourceFilter(branch, commit)


SourceOf = Annotated[SourceFilter | None, Depends(source_filter)]
BuildId = Annotated[str, Path(alias="buildId")]


async def present(
    builds: list[BuildRecord], links: InstallLinkReads, *, shared_link: bool = True
) -> list[schemas.Build]:
    """The builds as the API shows them (after a change: one statement reads their extras)."""
    extras = await build_extras(links.reads, [b.id for b in builds], links.now)
    return [
        shown_schema(ShownBuild(b, extras.get(b.id, NO_EXTRAS)), links, shared_link=shared_link)
        for b in builds
    ]


def shown_schema(
    shown: ShownBuild, links: InstallLinkReads, *, shared_link: bool = True
) -> schemas.Build:
    """A build as the API shows it, with its newest live shared install link's address and its
    warnings and console page (none of them to a tester: `shared_link` false), its channels and
    its download count.

    A tester installs through a link of their own, which dies with their access (their mail's,
    or the console's Install); a shared link handed to them would outlive it."""
    build, extras = shown.build, shown.extras
    url = links.url(extras.link) if extras.link and shared_link else None
    warnings = []
    if extras.same_version is not None and shared_link:
        warnings.append(
            schemas.BuildWarning(
                code="version_exists",
                detail=same_version_warning(build, extras.same_version),
                build_id=extras.same_version,
            )
        )
    return to_schema(
        build, links.public_url, url, extras.channels, extras.downloads, warnings,
        rollouts=extras.rollouts, console_page=shared_link,
        new_feedback_count=extras.new_feedback if shared_link else None,
    )  # fmt: skip


def _install_link(
    listed: ListedLink, build: BuildRecord, links: InstallLinkReads
) -> schemas.InstallLink:
    link, owner = listed.link, listed.owner
    url = links.url(link)
    return schemas.InstallLink(
        link_id=link.id,
        url=url,
        manifest_url=f"{url}/manifest.plist" if is_ios_build(build.file_name) else None,
        shared=owner is None,
        owner=None
        if owner is None
        else schemas.InstallLinkOwner(user_id=owner.user_id, email=owner.email, name=owner.name),
        created_by=link.created_by,
        created_at=link.created_at,
        expires_at=link.expires_at,
        revoked_at=link.revoked_at,
    )


@router.get(
    "",
    responses={
        **linked(200, "A page of builds", _build_links("$response.body#/builds/0")),
        **problem_responses(401, 403, 404, 422, 429),
    },
    summary="List builds, newest first",
    openapi_extra=PAGE_QUERY,
)
async def list_builds(
    access: BuildsReader,
    builds: Builds,
    links: LinkReads,
    page: Page,
    version: Version,
    source: SourceOf,
    status: Annotated[
        BuildStatus | None,
        Query(
            description="Only builds in this state; without it, ready and processing builds "
            "(a pending or failed upload is listed only when asked for)"
        ),
    ] = None,
    sort: Annotated[
        BuildOrder,
        Query(
            description="`newest` first (the default), or by `version`: the highest versionCode "
            "(an .ipa's numeric CFBundleVersion) first, builds without one last"
        ),
    ] = BuildOrder.NEWEST,
) -> schemas.BuildList:
    query = BuildQuery(
        access.application.id, page.limit, page.after_id, status, version, sort, tester(access),
        source=source,
    )  # fmt: skip
    found, next_cursor = await builds.shown_page(query)
    viewer = tester(access)
    shown = [shown_schema(build, links, shared_link=viewer is None) for build in found]
    return schemas.BuildList(builds=shown, next_cursor=next_cursor)


@router.post(
    "/upload-link",
    status_code=status.HTTP_201_CREATED,
    response_model=schemas.UploadLink,
    responses={
        **linked(201, "Where to PUT the file, and the pending build's id", _UPLOAD_LINKS),
        200: {
            "description": 'The declared sha256 is this ready build\'s, and `"onDuplicate": '
            '"reuse"` was asked: nothing to send',
            "model": schemas.Build,
        },
        **problem_responses(400, 401, 403, 404, 409, 413, 422, 429),
    },
    summary="Step 1: get an address to PUT the build file to (developer+)",
)
async def create_upload_link(
    body: schemas.UploadLinkRequest, access: BuildsUploader, service: Service, links: Links
) -> schemas.UploadLink | JSONResponse:
    build, target = await service.create_upload_link(
        access.application,
        access.caller.user,
        body.file_name,
        body.file_size,
        body.sha256,
        body.multipart,
        body.on_duplicate,
    )
    if build.status is BuildStatus.READY:  # the ready build of these bytes, reused
        shown = (await present([build], links.reads))[0]
        return JSONResponse(shown.model_dump(mode="json", by_alias=True))
    plan = None
    if build.part_size is not None:
        plan = schemas.MultipartPlan(
            part_size=build.part_size, parts_count=parts_count(build.file_size, build.part_size)
        )
    return schemas.UploadLink(
        upload_url=target.url if target else None,
        build_id=build.id,
        expires_at=build.expires_at,
        upload_method="PUT",
        upload_headers=target.headers if target else {},
        multipart=plan,
    )


@router.post(
    "/{buildId}/parts",
    responses={
        200: {"description": "A signed PUT address for each part asked for"},
        **problem_responses(400, 401, 403, 404, 409, 413, 422, 429),
    },
    summary="Step 2 of a multipart upload: addresses to PUT parts to (developer+)",
)
async def create_part_targets(
    build_id: BuildId, body: schemas.PartsRequest, access: BuildsUploader, service: Service
) -> schemas.PartTargets:
    targets = await service.part_targets(access.application, build_id, body.part_numbers)
    return schemas.PartTargets(
        parts=[
            schemas.PartTarget(
                part_number=t.number,
                url=t.target.url,
                headers=t.target.headers,
                expires_at=t.expires_at,
            )
            for t in targets
        ]
    )


@router.get(
    "/{buildId}/parts",
    responses={
        200: {"description": "The parts that have arrived"},
        **problem_responses(401, 403, 404, 409, 429),
    },
    summary="The parts of a multipart upload that have fully arrived (developer+)",
)
async def list_received_parts(
    build_id: BuildId, access: BuildsUploader, builds: Builds
) -> schemas.ReceivedParts:
    build, parts = await builds.received_parts(access.application.id, build_id)
    assert build.part_size is not None
    return schemas.ReceivedParts(
        parts=[
            schemas.ReceivedPart(part_number=p.number, size=p.size, received_at=p.received_at)
            for p in parts
        ],
        part_size=build.part_size,
        parts_count=parts_count(build.file_size, build.part_size),
    )


@router.post(
    "/verify",
    responses={
        **linked(200, "The ready build", _build_links("$response.body#")),
        202: {
            "description": "A large multipart build, joined: its bytes are being checked, and "
            "it becomes `ready` (or `failed`) by itself; GET it to follow",
            "model": schemas.Build,
        },
        **problem_responses(400, 401, 403, 404, 409, 413, 422, 429),
    },
    summary="Step 3: confirm the upload; the build becomes ready (developer+)",
)
async def verify_upload(
    body: schemas.VerifyRequest,
    access: BuildsUploader,
    service: Service,
    links: Links,
    ctx: Context,
    response: Response,
) -> schemas.Build:
    wanted = body.distribute
    asked = Verify(
        body.build_id, body.notes, body.channels, body.mandatory,
        link_hours=body.install_link.expires_in_hours if body.install_link else None,
        distribute=Distribution(wanted.groups, [str(e) for e in wanted.emails], wanted.notify)
        if wanted is not None else None,
        updater=body.updater_fields(),
        source=body.source.build_source() if body.source is not None else None,
    )  # fmt: skip
    build = await verify_and_release(service, links, distributor(ctx, service.db), access, asked)
    if build.status is BuildStatus.PROCESSING:
        response.status_code = status.HTTP_202_ACCEPTED
    return (await present([build], links.reads))[0]


@router.get(
    "/latest",
    responses={
        **linked(200, "The newest ready build", _build_links("$response.body#")),
        **problem_responses(401, 403, 404, 422, 429),
    },
    summary="The newest ready build (of a version, if asked): a stable address for CI",
)
async def latest_build(
    access: BuildsReader, builds: Builds, links: LinkReads, version: Version
) -> schemas.Build:
    viewer = tester(access)
    build = await builds.latest(access.application.id, version, viewer)
    return (await present([build], links, shared_link=viewer is None))[0]


# After /latest: a path parameter would take that word for a build id.
@router.get(
    "/{buildId}",
    responses={**linked(200, "The build", _build_links("$response.body#")), **BY_ID},
    summary="Get a build",
)
async def get_build(
    build_id: BuildId, access: BuildsReader, builds: Builds, links: LinkReads
) -> schemas.Build:
    viewer = tester(access)
    shown = await builds.shown(access.application.id, build_id, viewer)
    return shown_schema(shown, links, shared_link=viewer is None)


@router.put(
    "/{buildId}",
    responses={
        **linked(200, "The build", _build_links("$response.body#")),
        **problem_responses(400, 401, 403, 404, 413, 422, 429),
    },
    summary="Edit a build's notes, or mark it mandatory for update checks (developer+)",
)
async def update_build(
    build_id: BuildId,
    body: schemas.BuildUpdate,
    access: BuildsDeveloper,
    service: Service,
    links: Links,
) -> schemas.Build:
    build = await service.update(access.application, build_id, body.model_dump(exclude_unset=True))
    return (await present([build], links.reads))[0]


@router.put(
    "/{buildId}/channels",
    responses={
        **linked(200, "The build", _build_links("$response.body#")),
        **problem_responses(400, 401, 403, 404, 413, 422, 429),
    },
    summary="Publish a build to these release channels only, at a rollout percentage on each "
    "(developer+)",
    description="The build is published to exactly the channels given. `rolloutPercent` (one "
    "percentage for every channel given) and `rolloutPercents` (one per channel, by name; it "
    "wins over `rolloutPercent`) set the share of each channel's installs that "
    "`GET /api/updates/check` offers the build to (its staged rollout, by a stable bucket of "
    "the check's `installId`: docs/updates.md). A channel given neither keeps its percentage; "
    "a channel the build joins starts at 100. Every change of a percentage is recorded in the "
    "build's history (the console's build page), with who made it.",
)
async def set_build_channels(
    build_id: BuildId,
    body: schemas.BuildChannelsUpdate,
    access: BuildsDeveloper,
    service: Service,
    links: Links,
) -> schemas.Build:
    build = await service.set_channels(
        access.application, build_id, body.channels, body.rollouts(), access.caller.user.id
    )
    return (await present([build], links.reads))[0]


@router.put(
    "/{buildId}/blockmap",
    responses={
        **linked(200, "The build", _build_links("$response.body#")),
        **problem_responses(400, 401, 403, 404, 413, 422, 429),
    },
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}
            },
        }
    },
    summary="Attach electron-builder's `.blockmap` of the build's file (developer+): the raw "
    "bytes; electron-updater's differential download reads it",
)
async def put_build_blockmap(
    build_id: BuildId,
    request: Request,
    access: BuildsUploader,
    service: Service,
    links: Links,
    ctx: Context,
) -> schemas.Build:
    # On the data directory's disk past 1 MiB (a /tmp in memory would count against memory).
    spool = ctx.settings.data_dir / "blockmaps-incoming"
    spool.mkdir(parents=True, exist_ok=True)
    with tempfile.SpooledTemporaryFile(max_size=1024 * 1024, dir=str(spool)) as body:
        size = await _read_body(request, body, MAX_BLOCKMAP_BYTES)
        build = await service.attach_blockmap(access.application, build_id, body, size)
    return (await present([build], links.reads))[0]


async def _read_body(request: Request, into: IO[bytes], limit: int) -> int:
    """The request's body, into `into`, refused past `limit` bytes (before a byte is read when
    its Content-Length says so)."""
    declared = whole_number(request.headers.get("content-length", ""), max_digits=20)
    if declared is not None and declared > limit:
        raise PayloadTooLarge(
            f"A blockmap has at most {limit} bytes; this one declares {declared}",
            code="upload_too_large",
        )
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"A blockmap has at most {limit} bytes", code="upload_too_large")
        into.write(chunk)
    if size == 0:
        raise BadRequest("Send the blockmap's bytes as the body", code="empty_body")
    return size


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
    build_id: BuildId, access: BuildsDownloader, service: Service, request: Request
) -> RedirectResponse:
    url = await service.download(
        access.application,
        build_id,
        access.caller.user,
        request.headers.get("user-agent"),
        tester(access),
    )
    return RedirectResponse(url, status_code=status.HTTP_302_FOUND)


@router.delete(
    "/{buildId}",
    status_code=status.HTTP_204_NO_CONTENT,
    responses=BY_ID,
    summary="Delete a build and its file (developer+)",
)
async def delete_build(build_id: BuildId, access: BuildsDeveloper, service: Service) -> Response:
    await service.delete(access.application, build_id, access.caller.user)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get(
    "/{buildId}/icon",
    response_class=Response,
    responses={
        200: {"content": {"image/png": {"schema": {"type": "string", "format": "binary"}}}},
        **problem_responses(401, 403, 404, 429),
    },
    summary="The app icon the build's file carries, as a PNG (tester+)",
)
async def build_icon(build_id: BuildId, access: BuildsReader, builds: Builds) -> Response:
    build = await builds.get(access.application.id, build_id, tester(access))
    png = await builds.icon(build)
    return Response(png, media_type="image/png", headers=ICON_CACHE)


@router.post(
    "/{buildId}/install-link",
    status_code=status.HTTP_201_CREATED,
    responses={
        **linked(201, "The install link", _INSTALL_LINK_LINKS),
        **problem_responses(400, 401, 403, 404, 409, 422, 429),
    },
    summary="Create a shared install page for a ready build (developer+)",
)
async def create_install_link(
    build_id: BuildId,
    access: BuildsDeveloper,
    service: Service,
    links: Links,
    body: Annotated[schemas.InstallLinkRequest | None, Body()] = None,
) -> schemas.InstallLink:
    build = await service.reads.get(access.application.id, build_id)
    hours = (body or schemas.InstallLinkRequest()).expires_in_hours
    link = await links.create(build, access.caller.user, hours)
    return _install_link(ListedLink(link, None), build, links.reads)


@router.get(
    "/{buildId}/install-links",
    responses=BY_ID,
    summary="The build's install links, newest first, expired and revoked ones included "
    "(a tester: only their own)",
)
async def list_install_links(
    build_id: BuildId, access: InstallLinksReader, builds: Builds, links: LinkReads
) -> schemas.InstallLinkList:
    viewer = tester(access)
    build = await builds.get(access.application.id, build_id, viewer)
    listed = await links.of_build(build, viewer.user_id if viewer is not None else None)
    return schemas.InstallLinkList(
        install_links=[_install_link(link, build, links) for link in listed]
    )


@router.delete(
    "/{buildId}/install-links/{linkId}",
    status_code=status.HTTP_204_NO_CONTENT,
    responses=BY_ID,
    summary="Revoke an install link: its page answers 410 (developer+)",
)
async def revoke_install_link(
    build_id: BuildId,
    link_id: Annotated[str, Path(alias="linkId")],
    access: BuildsDeveloper,
    service: Service,
    links: Links,
) -> Response:
    build = await service.reads.get(access.application.id, build_id)
    link = await links.reads.find(build, link_id)
    await links.revoke(link, build, by=actor_of(access))
    return Response(status_code=status.HTTP_204_NO_CONTENT)

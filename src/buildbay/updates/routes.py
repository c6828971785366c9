"""`GET /api/updates/check`: public (the update key is the credential), cacheable, rate limited
per client IP and per application."""

from __future__ import annotations

import hashlib
from typing import Annotated

from fastapi import APIRouter, Query, Request, Response

from buildbay.applications.update_keys import UPDATE_KEY_MAX, UPDATE_KEY_PREFIX
from buildbay.auth.dependencies import client_ip, count_budget
from buildbay.builds.dependencies import install_link_reads, install_links
from buildbay.context import AppContext
from buildbay.db.reads import Reads
from buildbay.deps import Context, ReadsDep, TransactionRoute, request_session
from buildbay.feeds.cache import Mark
from buildbay.problems import problem_responses
from buildbay.schemas import NO_NUL_PATTERN
from buildbay.updates import schemas
from buildbay.updates.check import Answer, Caller, KeyOwner, answer, key_owner_until, unknown_key
from buildbay.updates.versions import MAX_LENGTH

router = APIRouter(prefix="/api/updates", tags=["updates"], route_class=TransactionRoute)

CACHE_CONTROL = "public, max-age=60"
_KEY_OWNER = "key owner"  # the feeds' cache's entries of update keys
INSTALL_ID_MAX = 128
INSTALL_ID_PATTERN = "^[A-Za-z0-9._:-]+$"
_SHORT = {"max_length": MAX_LENGTH, "pattern": NO_NUL_PATTERN}


def _schema(result: Answer) -> schemas.UpdateCheck:
    offer = result.offer
    if offer is None:
        return schemas.UpdateCheck(update_available=False, mandatory=False, build=None)
    build = offer.build
    return schemas.UpdateCheck(
        update_available=True,
        mandatory=result.mandatory,
        build=schemas.UpdateBuild(
            build_id=build.id,
            version_name=offer.version_name,
            version_code=offer.version_code,
            notes=build.notes,
            file_size=build.file_size,
            sha256=build.sha256,
            published_at=build.verified_at,
            install_url=offer.install_url,
            download_url=offer.download_url,
        ),
    )


def _matches(if_none_match: str | None, etag: str) -> bool:
    if not if_none_match:
        return False
    tags = [tag.strip().removeprefix("W/") for tag in if_none_match.split(",")]
    return "*" in tags or etag in tags


def etag_of(body: bytes) -> str:
    return f'"{hashlib.sha256(body).hexdigest()[:32]}"'


def cacheable(request: Request, body: bytes, media_type: str, etag: str | None = None) -> Response:
    """`body` with its ETag (`etag_of(body)`, unless given) and the public cache's header; 304
    when the client has it (If-None-Match). The update check's answers and the desktop feeds
    (feeds/routes.py)."""
    etag = etag or etag_of(body)
    headers = {"ETag": etag, "Cache-Control": CACHE_CONTROL}
    if _matches(request.headers.get("if-none-match"), etag):
        return Response(status_code=304, headers=headers)
    return Response(body, media_type=media_type, headers=headers)


async def owner_of_key(
    ctx: AppContext, request: Request, reads: Reads, key: str, mark: Mark | None = None
) -> KeyOwner:
    """The application an update key names, counted against the update check's budgets: per
    client IP before the key is looked up, per application after (the feeds share them).
    With the feeds' cache's `mark` (feeds/cache.py), the key's application is remembered."""
    settings = ctx.settings
    await count_budget(
        ctx, request, f"update-ip:{client_ip(request)}", settings.update_checks_per_minute_per_ip,
        "updates-ip", "More than {limit} update checks in a minute (updates-ip)",
    )  # fmt: skip
    if not key.startswith(UPDATE_KEY_PREFIX) or len(key) > UPDATE_KEY_MAX:
        raise unknown_key()
    owner: KeyOwner | None = ctx.feeds.get((_KEY_OWNER, key), mark)
    if owner is None:
        owner, until = await key_owner_until(reads, key, ctx.clock.now())
        ctx.feeds.put((_KEY_OWNER, key), owner, mark, until)
    await count_budget(
        ctx, request, f"update-app:{owner.application_id}",
        settings.update_checks_per_minute_per_key, "updates-key",
        "More than {limit} update checks in a minute (updates-key)",
    )  # fmt: skip
    return owner


@router.get(
    "/check",
    response_model=schemas.UpdateCheck,
    responses={
        200: {
            "description": "Whether there is a newer build for the caller, and which",
            "headers": {
                "ETag": {"schema": {"type": "string"}},
                "Cache-Control": {"schema": {"type": "string"}},
            },
        },
        304: {"description": "The answer has not changed (If-None-Match)"},
        **problem_responses(404, 422, 429),
    },
    summary="Is there a newer build for this app? (no token: the application's update key)",
)
async def check_for_update(
    request: Request,
    ctx: Context,
    reads: ReadsDep,
    key: Annotated[str, Query(description="The application's update key (`bbu_...`)", **_SHORT)],
    channel: Annotated[
        str,
        Query(
            description="The release channel the app follows (one the application does not "
            "have: 404 `unknown_channel`)",
            **_SHORT,
        ),
    ] = "default",
    version_code: Annotated[
        int | None,
        Query(
            alias="versionCode",
            ge=0,
            le=2**63 - 1,
            description="The running app's versionCode (Android) or CFBundleVersion (iOS)",
        ),
    ] = None,
    version_name: Annotated[
        str | None,
        Query(
            alias="versionName",
            description="The running app's versionName or CFBundleShortVersionString",
            **_SHORT,
        ),
    ] = None,
    platform: Annotated[
        str | None,
        Query(
            description="The device's platform: `android`, `ios`, `macos`, `windows` or `linux` "
            "(left out: the application's). Only files it installs are offered (never an .aab)",
            **_SHORT,
        ),
    ] = None,
    os: Annotated[
        str | None,
        Query(
            description="The OS version: Android's API level (34), iOS's version (17.4)", **_SHORT
        ),
    ] = None,
    install_id: Annotated[
        str | None,
        Query(
            alias="installId",
            min_length=1,
            max_length=INSTALL_ID_MAX,
            pattern=INSTALL_ID_PATTERN,
            description="A stable id of this installed copy (random, made on first launch and "
            "kept; a UUID will do): 1 to 128 of A-Z, a-z, 0-9, `.`, `_`, `:` and `-`. Hashed "
            "with each build's id into a bucket 0-99, it decides whether a build rolled out to "
            "part of the channel is offered (bucket below its percentage). Left out: only "
            "builds rolled out to 100% are offered",
        ),
    ] = None,
) -> Response:
    settings = ctx.settings
    owner = await owner_of_key(ctx, request, reads, key)
    caller = Caller(channel, version_code, version_name, platform, os, install_id)
    result = await answer(
        reads, owner, caller, install_link_reads(ctx, reads),
        lambda: install_links(ctx, request_session(request)),
        ctx.storage, settings.download_link_ttl_seconds,
    )  # fmt: skip
    body = _schema(result).model_dump_json(by_alias=True).encode()
    return cacheable(request, body, "application/json")

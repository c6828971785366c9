"""The storage address of the local backend: PUT receives a build file, GET serves one.

Neither takes a token: the signed URL is the credential, and it is checked before a byte of the
body is read.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse

from buildbay.builds.dependencies import build_reads
from buildbay.builds.records import BuildRecord
from buildbay.builds.schemas import StoredPart, StoredUpload
from buildbay.builds.updaters import needs_sha512
from buildbay.db.reads import Reads
from buildbay.deps import Context, TransactionRoute
from buildbay.errors import BadRequest, Forbidden, NotFound, PayloadTooLarge
from buildbay.numbers import whole_number
from buildbay.problems import problem_responses
from buildbay.storage.local import (
    DOWNLOAD_PATH,
    PART_PATH,
    UPLOAD_PATH,
    LocalStorage,
    part_resource,
)
from buildbay.storage.signing import UrlSigner

router = APIRouter(tags=["storage"], route_class=TransactionRoute)


def _signed_query(*names: str) -> dict[str, Any]:
    """The OpenAPI description of a signed URL's query: every part is required (the URL as
    given has them all), but read from the request rather than declared as `Query`
    parameters, so that a missing or altered part is a bad signature (403), not a validation
    error (422)."""
    return {
        "parameters": [
            {
                "name": name,
                "in": "query",
                "required": True,
                "description": "Part of the signed URL, as given",
                "schema": {"type": "string"},
            }
            for name in names
        ]
    }


def _number(value: str | None) -> int:
    number = whole_number(value, max_digits=16) if value is not None else None
    if number is None:
        raise Forbidden("The storage URL is incomplete or altered", code="invalid_signature")
    return number


# What each address reads of its signed URL, before anything else: `key` is the URL's path after
# the address, `query` its query. Each returns what the URL was signed for, or raises Forbidden
# (invalid_signature: not signed as it stands; url_expired: signed, but no longer valid at `now`).


def read_upload_url(signer: UrlSigner, key: str, query: Mapping[str, str], now: datetime) -> int:
    """An upload URL (LocalStorage.upload_target): the size its build file was signed for."""
    size = _number(query.get("size"))
    expires, signature = _number(query.get("expires")), query.get("signature")
    signer.verify("PUT", key, expires, signature or "", now, size)
    return size


def read_part_url(
    signer: UrlSigner, key: str, query: Mapping[str, str], now: datetime
) -> tuple[int, int]:
    """A part's URL (LocalStorage.part_target): the part's number and size."""
    number, size = _number(query.get("part")), _number(query.get("size"))
    expires, signature = _number(query.get("expires")), query.get("signature")
    signer.verify("PUT", part_resource(key, number), expires, signature or "", now, size)
    return number, size


def read_download_url(signer: UrlSigner, key: str, query: Mapping[str, str], now: datetime) -> str:
    """A download URL (LocalStorage.download_url): the file name it serves the file under."""
    name = query.get("name", "build")
    expires = _number(query.get("expires"))
    signature = query.get("signature")
    signer.verify("GET", f"{key}\n{name}", expires, signature or "", now)
    return name


# A PUT's body, in the OpenAPI document: the raw bytes.
_BINARY_BODY = {
    "required": True,
    "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
}


def _local(ctx: Context) -> LocalStorage:
    if not isinstance(ctx.storage, LocalStorage):
        raise NotFound("This server does not store files itself", code="not_found")
    return ctx.storage


@router.put(
    UPLOAD_PATH + "{key:path}",
    responses=problem_responses(400, 403, 404, 409, 413, 422, 503, 507),
    openapi_extra={
        **_signed_query("size", "expires", "signature"),
        "requestBody": _BINARY_BODY,
    },
    summary="Step 2: the raw bytes of a build file (the uploadUrl; signed, no token)",
)
async def receive_upload(key: str, request: Request, ctx: Context) -> StoredUpload:
    storage = _local(ctx)
    size_ = read_upload_url(ctx.signer, key, request.query_params, ctx.clock.now())
    build, with_sha512 = await _pending_upload(ctx, key)
    _check_length(request, size_, "the build's declared")
    # Checked again once the bytes are in: the build may have been verified or deleted meanwhile.
    info = await storage.receive(
        key,
        size_,
        request.stream(),
        before_publish=lambda: _pending_build(ctx, key),
        with_sha512=with_sha512,
    )
    assert info.sha256 is not None
    return StoredUpload(build_id=build.id, size=info.size, sha256=info.sha256)


@router.put(
    PART_PATH + "{key:path}",
    responses=problem_responses(400, 403, 404, 409, 413, 422, 503, 507),
    openapi_extra={
        **_signed_query("part", "size", "expires", "signature"),
        "requestBody": _BINARY_BODY,
    },
    summary="Step 2 of a multipart upload: one part's bytes (a part's url; signed, no token)",
)
async def receive_part(key: str, request: Request, ctx: Context) -> StoredPart:
    storage = _local(ctx)
    number, size_ = read_part_url(ctx.signer, key, request.query_params, ctx.clock.now())
    build, with_sha512 = await _pending_upload(ctx, key)
    _check_length(request, size_, "the part's")
    # Verify and delete take the upload away under the storage's own locks: a part that
    # streams meanwhile is refused, not half kept.
    part = await storage.receive_part(key, number, size_, request.stream(), with_sha512)
    return StoredPart(build_id=build.id, part_number=part.number, size=part.size)


async def _pending_upload(ctx: Context, key: str) -> tuple[BuildRecord, bool]:
    """`_pending_build`, and whether its bytes are hashed through SHA-512 as they arrive (a
    desktop application's build: updaters.needs_sha512)."""
    reads = Reads.on(ctx.read_engine)
    try:
        builds = build_reads(ctx, reads)
        build = await builds.pending_upload(key)
        platform = await builds.platform_of(build)
    finally:
        await reads.close()
    return build, platform is not None and needs_sha512(platform)


async def _pending_build(ctx: Context, key: str) -> BuildRecord:
    """The build whose upload `key` is, still pending (else the refusal of `pending_upload`).
    A short read of its own: no database connection is held while the bytes stream in."""
    reads = Reads.on(ctx.read_engine)
    try:
        return await build_reads(ctx, reads).pending_upload(key)
    finally:
        await reads.close()


def _check_length(request: Request, size: int, what: str) -> None:
    """Refuse a body whose declared length is not the signed size, before reading a byte
    (`what` names that size: "the part's")."""
    declared = whole_number(request.headers.get("content-length", ""), max_digits=20)
    if declared is not None and declared > size:
        raise PayloadTooLarge(
            f"Content-Length {declared} is above {what} {size} bytes",
            code="upload_too_large",
        )
    if declared is not None and declared < size:
        raise BadRequest(
            f"Content-Length {declared} is below {what} {size} bytes",
            code="upload_too_short",
        )


@router.get(
    DOWNLOAD_PATH + "{key:path}",
    response_class=FileResponse,
    responses={200: {"content": {"application/octet-stream": {}}}, **problem_responses(403, 404)},
    openapi_extra=_signed_query("name", "expires", "signature"),
    summary="A build file (the signed address the download endpoint redirects to)",
)
async def serve_file(key: str, request: Request, ctx: Context) -> FileResponse:
    storage = _local(ctx)
    name = read_download_url(ctx.signer, key, request.query_params, ctx.clock.now())
    path = storage.path_of(key)
    if not path.is_file():
        raise NotFound("This build file no longer exists", code="object_not_found")
    return FileResponse(path, filename=name, media_type="application/octet-stream")

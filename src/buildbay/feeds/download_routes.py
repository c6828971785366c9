"""`GET|HEAD /feeds/{updateKey}/download/{buildId}/{fileName}`: a build's file (or its
blockmap) at the stable address the feeds write (feeds/download.py says what it opens).

From the local disk the API process serves the bytes itself, through Starlette's FileResponse,
which streams them in blocks and answers Range requests: one range (206, Content-Range), several
(206 multipart/byteranges, as electron-updater's differential download reads them), with
`Accept-Ranges: bytes`; ranges.py decides first what the header asks (416 problem+json when
nothing of it is in the file). On S3 the address redirects (307) to a presigned URL of the
object, which S3 serves with its own Range support (one range per request: S3 has no
multipart/byteranges, so electron-updater's differential download falls back to the whole file
there).
"""

from __future__ import annotations

import os
import pathlib
from typing import Annotated, Any

from fastapi import APIRouter, Path, Request, Response
from fastapi.responses import FileResponse, RedirectResponse
from starlette.types import Receive, Scope, Send

from buildbay.auth.dependencies import client_ip, count_budget
from buildbay.deps import TransactionRoute, get_context, request_reads
from buildbay.errors import NotFound
from buildbay.feeds.download import FeedFile, feed_file
from buildbay.feeds.ranges import MAX_RANGES, WHOLE, Ranges, requested_ranges
from buildbay.problems import problem_responses
from buildbay.schemas import NO_NUL_PATTERN
from buildbay.storage.local import LocalStorage
from buildbay.updates.check import url_expiry

router = APIRouter(prefix="/feeds", tags=["desktop feeds"], route_class=TransactionRoute)

CACHE_CONTROL = "public, max-age=60"
_PATH = {"pattern": NO_NUL_PATTERN, "max_length": 255}


class FeedFileResponse(FileResponse):
    """FileResponse serving exactly `ranges` (ranges.py read the request's header; the
    If-Range that decided whether to read it is settled too)."""

    max_ranges = MAX_RANGES  # electron-updater asks for up to 1000 in one request

    def __init__(self, path: str | os.PathLike[str], ranges: Ranges, **kw: object) -> None:
        super().__init__(path, **kw)  # type: ignore[arg-type]
        self.ranges = ranges

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = [
            (name, value)
            for name, value in scope["headers"]
            if name not in (b"range", b"if-range")
        ]  # fmt: skip
        if (header := self.ranges.header) is not None:
            headers.append((b"range", header.encode("latin-1")))
        await super().__call__({**scope, "headers": headers}, receive, send)


def _matches(if_none_match: str | None, etag: str) -> bool:
    if not if_none_match:
        return False
    tags = [tag.strip().removeprefix("W/") for tag in if_none_match.split(",")]
    return "*" in tags or etag in tags


_ROUTE: dict[str, Any] = {
    "path": "/{updateKey}/download/{buildId}/{fileName}",
    "response_class": FileResponse,
    "responses": {
        200: {
            "description": "The whole file (`Accept-Ranges: bytes`)",
            "content": {"application/octet-stream": {}},
        },
        206: {
            "description": "The range asked for (Content-Range), or several as "
            "multipart/byteranges",
            "content": {"application/octet-stream": {}, "multipart/byteranges": {}},
        },
        304: {"description": "The file has not changed (If-None-Match)"},
        307: {"description": "Where the storage serves the file (S3: a presigned URL)"},
        **problem_responses(404, 416, 429),
    },
}


@router.head(**_ROUTE, summary="A feed file's headers: its size, ETag and Accept-Ranges (no token)")
@router.get(
    **_ROUTE,
    summary="A file the feeds point at: a build's file or its blockmap (no token: the "
    "application's update key)",
)
async def download_feed_file(
    request: Request,
    update_key: Annotated[
        str, Path(alias="updateKey", description="The application's update key", **_PATH)
    ],
    build_id: Annotated[str, Path(alias="buildId", **_PATH)],
    file_name: Annotated[
        str,
        Path(alias="fileName", description="The build's file name, or it + `.blockmap`", **_PATH),
    ],
) -> Response:
    # The context and the reads from the request, not as dependencies: FastAPI solves each
    # dependency anew on every request, which for this route (one of electron-updater's many
    # Range requests an update, its answer remembered) was half of its own work (py-spy,
    # bench/feeds_download.py); the reads are opened only when the address is not remembered.
    ctx = get_context(request)
    # Per client IP, a budget of their own at the install pages' rate (one update is many
    # requests: HEAD, the blockmaps, a Range request per group of changed blocks).
    await count_budget(
        ctx, request, f"feed-download-ip:{client_ip(request)}",
        ctx.settings.install_pages_per_minute_per_ip, "feed-downloads",
        "More than {limit} feed downloads in a minute from this address",
    )  # fmt: skip
    now = ctx.clock.now()
    # Every Range request of a download asks the same: remembered (feeds/cache.py).
    cache = ctx.feeds
    mark = await cache.mark()
    storage = ctx.storage
    cached: tuple[FeedFile, pathlib.Path | None] | None = cache.get(
        ("file", update_key, build_id, file_name), mark
    )
    if cached is None:
        found = await feed_file(request_reads(request), update_key, build_id, file_name, now)
        # Where the object is, resolved once: the resolution (a system call per part of the
        # path) cost more than the rest of the route together (py-spy, bench/feeds_download.py).
        local = storage.path_of(found.storage_key) if isinstance(storage, LocalStorage) else None
        cached = found, local
        cache.put(("file", update_key, build_id, file_name), cached, mark, found.key_expires_at)
    found, path = cached
    if path is None:
        url = await storage.download_url(
            found.storage_key, found.file_name,
            url_expiry(now, ctx.settings.download_link_ttl_seconds), found.storage_version,
        )  # fmt: skip
        return RedirectResponse(url, status_code=307, headers={"Cache-Control": "no-store"})
    headers = {"ETag": found.etag, "Cache-Control": CACHE_CONTROL}
    if _matches(request.headers.get("if-none-match"), found.etag):
        return Response(status_code=304, headers=headers)
    try:
        # Not worth a thread hop (bench/feeds_download.py): the stat of a local file answers in
        # microseconds, from the inode cache of a file just served.
        stat = path.stat()
    except FileNotFoundError:
        raise NotFound(
            "The build's file is missing from storage (it is being deleted)",
            code="object_not_found",
        ) from None
    ranges = WHOLE
    if_range = request.headers.get("if-range")
    # If-Range: the ranges only of the bytes the client holds part of (strong ETag), else all.
    if if_range is None or if_range.strip() == found.etag:
        ranges = requested_ranges(request.headers.get("range"), stat.st_size)
    return FeedFileResponse(
        path, ranges, stat_result=stat, headers=headers, filename=found.file_name,
        media_type="application/octet-stream",
    )  # fmt: skip

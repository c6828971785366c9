"""`/feeds/{updateKey}/download/{buildId}/{fileName}`: a desktop build's file (and its
blockmap) at the address the feeds write, with Range requests as electron-updater makes them,
404s that say which part of the address names nothing, the rotated key's window, and S3's
redirect."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import random
import re
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from buildbay.app import create_app
from buildbay.builds.sweeper import sweep_orphan_objects
from buildbay.clock import FrozenClock
from buildbay.config import Settings, StorageKind
from tests.builds.conftest import Builds
from tests.conftest import BASE_URL, S3_REGION, Api, S3Server, assert_problem
from tests.desktop import files

SIZE = 300_000


def payload(size: int = SIZE, seed: int = 1) -> bytes:
    """An AppImage's header, then bytes that differ everywhere (a range read from the wrong
    place cannot pass for the right one)."""
    head = files.appimage(size=64)
    return head + random.Random(seed).randbytes(size - len(head))


def blockmap(files_: list[dict[str, Any]] | None = None) -> bytes:
    """A blockmap as electron-builder writes it: gzipped JSON of the file's blocks."""
    document = {
        "version": "2",
        "files": files_
        or [{"name": "file", "offset": 0, "checksums": ["a" * 24], "sizes": [SIZE]}],
    }
    return gzip.compress(json.dumps(document).encode(), mtime=0)


async def linux_app(builds: Builds) -> str:
    """The application made a Linux one; its update key."""
    path = f"/api/projects/{builds.project_id}/applications/{builds.app_id}"
    r = await builds.client.put(path, json={"platform": "linux"}, headers=builds.owner.headers)
    assert r.status_code == 200, r.text
    key: str = r.json()["updateKey"]
    return key


async def ready(builds: Builds, data: bytes, name: str = "Example-2.0.0.AppImage") -> str:
    link = await builds.pending(data, fileName=name)
    r = await builds.verify(link["buildId"], version="2.0.0")
    assert r.status_code == 200, r.text
    build_id: str = link["buildId"]
    return build_id


async def put_blockmap(
    client: httpx.AsyncClient, builds: Builds, build_id: str, body: bytes
) -> httpx.Response:
    return await client.put(
        f"{builds.base}/{build_id}/blockmap",
        content=body,
        headers={**builds.owner.headers, "Content-Type": "application/octet-stream"},
    )


def address(key: str, build_id: str, name: str = "Example-2.0.0.AppImage") -> str:
    return f"/feeds/{key}/download/{build_id}/{name}"


@pytest.fixture
async def published(builds: Builds) -> tuple[str, str, bytes]:
    """A Linux application's ready build, published to `default` for everyone (verify's
    default): its update key, id and bytes."""
    key = await linux_app(builds)
    data = payload()
    return key, await ready(builds, data), data


# -- whole file, HEAD, caching -------------------------------------------------------------------


async def test_the_whole_file_and_head(builds: Builds, published: tuple[str, str, bytes]) -> None:
    key, build_id, data = published

    r = await builds.client.get(address(key, build_id))

    assert r.status_code == 200
    assert r.content == data
    assert r.headers["accept-ranges"] == "bytes"
    assert r.headers["content-length"] == str(SIZE)
    assert r.headers["content-type"] == "application/octet-stream"
    assert r.headers["content-disposition"] == 'attachment; filename="Example-2.0.0.AppImage"'
    assert r.headers["etag"] == f'"{hashlib.sha256(data).hexdigest()}"'
    head = await builds.client.head(address(key, build_id))
    assert head.status_code == 200
    assert head.content == b""
    assert head.headers["content-length"] == str(SIZE)
    assert head.headers["etag"] == r.headers["etag"]
    assert head.headers["accept-ranges"] == "bytes"
    cached = await builds.client.get(
        address(key, build_id), headers={"If-None-Match": r.headers["etag"]}
    )
    assert cached.status_code == 304
    assert cached.content == b""


# -- ranges --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "first", "last"),
    [
        ("bytes=100-199", 100, 199),
        ("bytes=299990-", 299990, SIZE - 1),
        ("bytes=-10", SIZE - 10, SIZE - 1),
        ("bytes=299000-999999999", 299000, SIZE - 1),  # past the end: to the end
        ("BYTES = 5-5", 5, 5),
        # Of these, only the first is in the file: it alone is served.
        ("bytes=7-8, 400000-400010", 7, 8),
    ],
)
async def test_a_single_range(
    builds: Builds, published: tuple[str, str, bytes], header: str, first: int, last: int
) -> None:
    key, build_id, data = published

    r = await builds.client.get(address(key, build_id), headers={"Range": header})

    assert r.status_code == 206, r.text
    assert r.headers["content-range"] == f"bytes {first}-{last}/{SIZE}"
    assert r.headers["content-length"] == str(last - first + 1)
    assert r.content == data[first : last + 1]
    head = await builds.client.head(address(key, build_id), headers={"Range": header})
    assert head.status_code == 206
    assert head.headers["content-range"] == r.headers["content-range"]


def byteranges(response: httpx.Response, lengths: list[int]) -> list[tuple[str, bytes]]:
    """The parts of a multipart/byteranges body, read as electron-updater's DataSplitter reads
    them: its boundary by the same expression, each part's headers up to a blank line, then as
    many bytes as the part was asked for, then the boundary again. Each part's Content-Range
    and bytes."""
    content_type = response.headers["content-type"]
    m = re.match(r'^multipart/.+?\s*;\s*boundary=(?:"([^"]+)"|([^\s";]+))\s*$', content_type, re.I)
    assert m is not None, content_type
    boundary = (m[1] or m[2]).encode()
    body = response.content
    parts: list[tuple[str, bytes]] = []
    at = 0
    for length in lengths:
        opener = (b"\r\n" if parts else b"") + b"--" + boundary
        assert body[at : at + len(opener)] == opener
        end_of_headers = body.index(b"\r\n\r\n", at)
        headers = body[at + len(opener) : end_of_headers].decode("latin-1")
        ranges = [
            line for line in headers.split("\r\n") if line.lower().startswith("content-range:")
        ]
        assert len(ranges) == 1, headers
        start = end_of_headers + 4
        parts.append((ranges[0].split(":", 1)[1].strip(), body[start : start + length]))
        at = start + length
    assert body[at:] == b"\r\n--" + boundary + b"--"
    assert int(response.headers["content-length"]) == len(body)
    return parts


async def test_multiple_ranges_as_electron_updater_asks(
    builds: Builds, published: tuple[str, str, bytes]
) -> None:
    key, build_id, data = published
    spans = [(0, 9), (1000, 1999), (5000, 5099), (299_999, 299_999)]
    header = "bytes=" + ", ".join(f"{a}-{b}" for a, b in spans)  # as multipleRangeDownloader

    r = await builds.client.get(address(key, build_id), headers={"Range": header})

    assert r.status_code == 206
    parts = byteranges(r, [b - a + 1 for a, b in spans])
    assert parts == [(f"bytes {a}-{b}/{SIZE}", data[a : b + 1]) for a, b in spans]


async def test_a_thousand_ranges_in_one_request(
    builds: Builds, published: tuple[str, str, bytes]
) -> None:
    """electron-updater groups up to 1000 changed blocks in one request."""
    key, build_id, data = published
    spans = [(i * 300, i * 300 + 99) for i in range(1000)]
    header = "bytes=" + ", ".join(f"{a}-{b}" for a, b in spans)

    r = await builds.client.get(address(key, build_id), headers={"Range": header})

    assert r.status_code == 206
    parts = byteranges(r, [100] * 1000)
    assert [content for _, content in parts] == [data[a : b + 1] for a, b in spans]


async def test_ranges_overlapping_are_served_merged(
    builds: Builds, published: tuple[str, str, bytes]
) -> None:
    key, build_id, data = published
    r = await builds.client.get(
        address(key, build_id), headers={"Range": "bytes=2000-2999, 0-99, 50-149"}
    )
    assert r.status_code == 206
    parts = byteranges(r, [150, 1000])
    assert parts == [
        (f"bytes 0-149/{SIZE}", data[:150]),
        (f"bytes 2000-2999/{SIZE}", data[2000:3000]),
    ]


@pytest.mark.parametrize("header", [f"bytes={SIZE}-", f"bytes={SIZE}-{SIZE + 10}", "bytes=-0"])
async def test_a_range_outside_the_file_is_416(
    builds: Builds, published: tuple[str, str, bytes], header: str
) -> None:
    key, build_id, _ = published
    r = await builds.client.get(address(key, build_id), headers={"Range": header})
    body = assert_problem(r, 416, "range_not_satisfiable")
    assert r.headers["content-range"] == f"bytes */{SIZE}"
    assert str(SIZE) in body["detail"]


@pytest.mark.parametrize(
    "header", ["bytes=5-3", "items=0-5", "bytes=abc", "bytes=-", "bytes=", "0-5", "bytes=1-2-3"]
)
async def test_a_malformed_range_is_ignored_the_whole_file(
    builds: Builds, published: tuple[str, str, bytes], header: str
) -> None:
    key, build_id, data = published
    r = await builds.client.get(address(key, build_id), headers={"Range": header})
    assert r.status_code == 200
    assert r.content == data


async def test_if_range_serves_the_range_only_of_the_same_bytes(
    builds: Builds, published: tuple[str, str, bytes]
) -> None:
    key, build_id, data = published
    etag = f'"{hashlib.sha256(data).hexdigest()}"'
    same = await builds.client.get(
        address(key, build_id), headers={"Range": "bytes=10-19", "If-Range": etag}
    )
    assert same.status_code == 206
    assert same.content == data[10:20]
    for stale in ('"0123"', f"W/{etag}", "Sat, 01 Jan 2000 00:00:00 GMT"):
        r = await builds.client.get(
            address(key, build_id), headers={"Range": "bytes=10-19", "If-Range": stale}
        )
        assert r.status_code == 200, stale
        assert r.content == data
    # Not even a 416 when If-Range says the client's bytes are others.
    r = await builds.client.get(
        address(key, build_id), headers={"Range": f"bytes={SIZE}-", "If-Range": '"0123"'}
    )
    assert r.status_code == 200


# -- what the address opens, and the 404s that say why not ---------------------------------------


async def test_what_an_address_does_not_open_is_404_saying_why(
    builds: Builds, api: Api, published: tuple[str, str, bytes]
) -> None:
    key, build_id, _ = published
    client = builds.client

    r = await client.get(address("bbu_" + "x" * 32, build_id))
    assert_problem(r, 404, "unknown_update_key")
    r = await client.get(address("not-a-key", build_id))
    assert_problem(r, 404, "unknown_update_key")
    r = await client.get(address(key, "b" * 32))
    assert "b" * 32 in assert_problem(r, 404, "unknown_build")["detail"]
    r = await client.get(address(key, build_id, "other.AppImage"))
    detail = assert_problem(r, 404, "unknown_file")["detail"]
    assert "Example-2.0.0.AppImage" in detail
    r = await client.get(address(key, build_id, "Example-2.0.0.AppImage.blockmap"))
    assert_problem(r, 404, "no_blockmap")

    # A build of another application of the same owner: not under this key.
    other = await api.application(builds.owner, builds.project_id, name="Other", platform="linux")
    r = await client.get(address(other["updateKey"], build_id))
    assert_problem(r, 404, "unknown_build")

    # A pending build.
    link = await builds.pending(payload(seed=2), fileName="Example-2.1.0.AppImage")
    r = await client.get(address(key, link["buildId"], "Example-2.1.0.AppImage"))
    assert_problem(r, 404, "unknown_build")


async def test_a_build_on_no_channel_or_not_for_everyone_is_not_served(
    builds: Builds, published: tuple[str, str, bytes]
) -> None:
    key, build_id, _ = published
    channels = f"{builds.base}/{build_id}/channels"
    r = await builds.client.put(channels, json={"channels": []}, headers=builds.owner.headers)
    assert r.status_code == 200, r.text
    r = await builds.client.get(address(key, build_id))
    assert_problem(r, 404, "build_not_published")
    r = await builds.client.put(
        channels, json={"channels": ["default"]}, headers=builds.owner.headers
    )
    assert r.status_code == 200, r.text
    assert (await builds.client.get(address(key, build_id))).status_code == 200


async def test_a_deleted_build_is_404_and_its_blockmap_goes_with_it(
    builds: Builds, published: tuple[str, str, bytes]
) -> None:
    key, build_id, _ = published
    r = await put_blockmap(builds.client, builds, build_id, blockmap())
    assert r.status_code == 200, r.text
    stored = f"{builds.project_id}/{builds.app_id}/{build_id}.blockmap"
    assert await builds.storage.stat(stored) is not None

    r = await builds.client.delete(f"{builds.base}/{build_id}", headers=builds.owner.headers)
    assert r.status_code == 204, r.text

    for name in ("Example-2.0.0.AppImage", "Example-2.0.0.AppImage.blockmap"):
        r = await builds.client.get(address(key, build_id, name))
        assert_problem(r, 404, "unknown_build")
    assert await builds.storage.stat(stored) is None


async def test_a_rotated_key_keeps_its_addresses_for_seven_days(
    builds: Builds, published: tuple[str, str, bytes], clock: FrozenClock
) -> None:
    old, build_id, data = published
    path = f"/api/projects/{builds.project_id}/applications/{builds.app_id}/update-key"
    r = await builds.client.post(path, headers=builds.owner.headers)
    assert r.status_code == 200, r.text
    new = r.json()["updateKey"]
    for key in (old, new):
        assert (await builds.client.get(address(key, build_id))).content == data

    clock.advance(hours=24 * 7 - 1)
    r = await builds.client.get(address(old, build_id), headers={"Range": "bytes=0-0"})
    assert r.status_code == 206
    clock.advance(hours=2)
    assert_problem(await builds.client.get(address(old, build_id)), 404, "unknown_update_key")
    assert (await builds.client.get(address(new, build_id))).content == data


# -- the blockmap --------------------------------------------------------------------------------


async def test_a_blockmap_attached_is_served_beside_the_file(
    builds: Builds, published: tuple[str, str, bytes]
) -> None:
    key, build_id, _ = published
    first = blockmap()
    r = await put_blockmap(builds.client, builds, build_id, first)
    assert r.status_code == 200, r.text
    assert r.json()["blockmapSize"] == len(first)
    assert (await builds.get(build_id)).json()["blockmapSize"] == len(first)

    name = "Example-2.0.0.AppImage.blockmap"
    r = await builds.client.get(address(key, build_id, name))
    assert r.status_code == 200
    assert r.content == first
    assert r.headers["etag"] == f'"{hashlib.sha256(first).hexdigest()}"'

    # A new one (CI ran again) replaces it, under a new ETag.
    second = blockmap([{"name": "file", "offset": 0, "checksums": ["b" * 24], "sizes": [SIZE]}])
    r = await put_blockmap(builds.client, builds, build_id, second)
    assert r.json()["blockmapSize"] == len(second)
    r = await builds.client.get(address(key, build_id, name))
    assert r.content == second
    assert r.headers["etag"] == f'"{hashlib.sha256(second).hexdigest()}"'


def _zipped(data: bytes) -> bytes:
    return gzip.compress(data, mtime=0)


NOT_BLOCKMAPS = {
    "gzip": lambda: b'{"version": "2", "files": []}',
    "JSON": lambda: _zipped(b"not json"),
    '"version"': lambda: _zipped(b'{"files": []}'),
    '"files"': lambda: _zipped(b"[1, 2]"),
    "cut short": lambda: _zipped(b'{"version": "2", "files": []}')[:-6],
    "more than": lambda: _zipped(b" " * (200 * 1024 * 1024)),  # a bomb: 200 MiB of spaces
}


@pytest.mark.parametrize("why", list(NOT_BLOCKMAPS))
async def test_what_is_not_a_blockmap_is_refused(
    builds: Builds, published: tuple[str, str, bytes], why: str
) -> None:
    _, build_id, _ = published
    body = NOT_BLOCKMAPS[why]()
    r = await put_blockmap(builds.client, builds, build_id, body)
    assert why in assert_problem(r, 422, "invalid_blockmap")["detail"]
    assert (await builds.get(build_id)).json()["blockmapSize"] is None


async def test_a_blockmap_too_large_or_empty_is_refused(
    builds: Builds, published: tuple[str, str, bytes]
) -> None:
    _, build_id, _ = published
    url = f"{builds.base}/{build_id}/blockmap"
    raw = {**builds.owner.headers, "Content-Type": "application/octet-stream"}
    r = await builds.client.put(url, content=b"x" * (16 * 1024 * 1024 + 1), headers=raw)
    assert_problem(r, 413, "upload_too_large")
    r = await builds.client.put(url, content=b"", headers=raw)
    assert_problem(r, 400, "empty_body")
    r = await builds.client.put(url, content=blockmap(), headers=builds.owner.headers)
    assert_problem(r, 400, "unsupported_content_type")
    r = await put_blockmap(builds.client, builds, "c" * 32, blockmap())
    assert_problem(r, 404)


async def test_the_sweeper_keeps_a_blockmap_while_its_build_exists(
    app: FastAPI, builds: Builds, published: tuple[str, str, bytes], clock: FrozenClock
) -> None:
    _, build_id, _ = published
    r = await put_blockmap(builds.client, builds, build_id, blockmap())
    assert r.status_code == 200
    prefix = f"{builds.project_id}/{builds.app_id}"
    kept = f"{prefix}/{build_id}.blockmap"
    orphan = f"{prefix}/{'d' * 32}.blockmap"  # no build of that key
    await builds.storage.put(orphan, io.BytesIO(blockmap()), len(blockmap()), "x")
    clock.advance(hours=2)

    sessions = app.state.ctx.sessions
    assert (
        await sweep_orphan_objects(sessions, builds.storage, clock.now() + timedelta(hours=2)) == 1
    )

    assert await builds.storage.stat(kept) is not None
    assert await builds.storage.stat(orphan) is None


# -- S3: a redirect to the bucket ----------------------------------------------------------------


@pytest.fixture
async def s3_app(
    settings: Settings, clock: FrozenClock, s3_server: S3Server
) -> AsyncIterator[FastAPI]:
    s3_settings = settings.model_copy(
        update={
            "storage": StorageKind.S3,
            "s3_bucket": s3_server.new_bucket(),
            "s3_endpoint_url": s3_server.endpoint_url,
            "s3_region": S3_REGION,
        }
    )
    application = create_app(s3_settings, clock=clock, migrate_on_start=False)
    yield application
    await application.state.ctx.dispose()


async def test_on_s3_the_address_redirects_to_the_bucket(s3_app: FastAPI) -> None:
    storage = s3_app.state.ctx.storage
    async with (
        httpx.AsyncClient(transport=httpx.ASGITransport(app=s3_app), base_url=BASE_URL) as client,
        httpx.AsyncClient(timeout=30) as bucket,
    ):
        api = Api(client)
        owner = await api.register()
        project = await api.project(owner)
        application = await api.application(owner, project["id"], platform="linux")
        builds = Builds(client, api, owner, project["id"], application["id"], storage, bucket)
        data = payload()
        build_id = await ready(builds, data)
        r = await put_blockmap(client, builds, build_id, blockmap())
        assert r.status_code == 200, r.text
        key = application["updateKey"]

        r = await client.get(address(key, build_id), headers={"Range": "bytes=100-199"})

        assert r.status_code == 307
        assert r.headers["cache-control"] == "no-store"
        location = r.headers["location"]
        assert not location.startswith(BASE_URL)
        got = await bucket.get(location, headers={"Range": "bytes=100-199"})
        assert got.status_code == 206
        assert got.content == data[100:200]
        assert "Example-2.0.0.AppImage" in got.headers["content-disposition"]
        r = await client.get(address(key, build_id, "Example-2.0.0.AppImage.blockmap"))
        assert r.status_code == 307
        assert (await bucket.get(r.headers["location"])).content == blockmap()
        # The 404s are the same as on the disk.
        r = await client.get(address(key, "e" * 32))
        assert_problem(r, 404, "unknown_build")


async def test_the_installed_versions_blockmap_at_the_address_electron_updater_derives(
    builds: Builds,
) -> None:
    """electron-updater asks for the installed version's blockmap at the new file's address
    with the new version replaced by the installed one (Provider.getBlockMapFiles)."""
    key = await linux_app(builds)
    old_id = await ready(builds, payload(seed=3), "Example-1.0.0.AppImage")
    new_id = await ready(builds, payload(seed=4), "Example-2.0.0.AppImage")
    old_blockmap = blockmap([{"name": "file", "offset": 0, "checksums": ["c"], "sizes": [SIZE]}])
    derived = address(key, new_id, "Example-1.0.0.AppImage.blockmap")
    assert_problem(await builds.client.get(derived), 404, "unknown_file")  # none yet

    r = await put_blockmap(builds.client, builds, old_id, old_blockmap)
    assert r.status_code == 200, r.text

    r = await builds.client.get(derived)
    assert r.status_code == 200
    assert r.content == old_blockmap
    # Its own address answers alike.
    own = await builds.client.get(address(key, old_id, "Example-1.0.0.AppImage.blockmap"))
    assert own.content == old_blockmap
    # Not a file of the build by another name, only a blockmap.
    r = await builds.client.get(address(key, new_id, "Example-1.0.0.AppImage"))
    assert_problem(r, 404, "unknown_file")

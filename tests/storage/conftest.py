"""Storage fixtures: one harness per Storage implementation, so the contract suite runs on each.

Each name in STORAGE_BACKENDS has a `_<name>_harness` fixture that builds a StorageHarness: the
local backend inside the app, and the S3 backend against moto's server in a separate process.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import select

from buildbay.builds.models import Build
from buildbay.clock import FrozenClock
from buildbay.storage.base import Storage
from buildbay.storage.local import LocalStorage
from buildbay.storage.s3 import S3Storage
from buildbay.storage.signing import UrlSigner
from tests.conftest import BASE_URL, S3_REGION, Api, S3Server

STORAGE_BACKENDS = ["local", "s3"]


@dataclass
class StorageHarness:
    """A Storage implementation and what a test needs around it."""

    storage: Storage
    # Reaches the backend's upload and download URLs.
    http: httpx.AsyncClient
    clock: FrozenClock
    # Stores bytes under a key the way the backend receives an upload.
    put: Callable[[str, bytes], Awaitable[None]]
    # A fresh key that an upload URL may be issued for (the backend may need to know the upload).
    uploadable_key: Callable[[int], Awaitable[str]]
    # Why this backend's server does not check what a URL's signature covers (expiry, size), or
    # None when it does. moto's S3 accepts any signature; real S3 and MinIO do not.
    unsigned_reason: str | None = None


HOUR = timedelta(hours=1)


def new_key() -> str:
    return f"prj_{uuid.uuid4().hex[:8]}/app_{uuid.uuid4().hex[:8]}/bld_{uuid.uuid4().hex}"


async def chunks_of(data: bytes, size: int = 64 * 1024) -> AsyncIterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


@pytest.fixture
async def _local_harness(
    app: FastAPI, client: httpx.AsyncClient, api: Api, clock: FrozenClock
) -> StorageHarness:
    storage = app.state.ctx.storage
    assert isinstance(storage, LocalStorage)

    async def put(key: str, data: bytes) -> None:
        await storage.receive(key, len(data), chunks_of(data))

    async def uploadable_key(size: int) -> str:
        # The local storage address takes bytes only for a pending build: make one.
        owner = await api.register()
        project = await api.project(owner)
        application = await api.application(owner, project["id"])
        r = await client.post(
            f"/api/app-distribution/{project['id']}/{application['id']}/builds/upload-link",
            json={"fileName": "contract.bin", "fileSize": size},
            headers=owner.headers,
        )
        assert r.status_code == 201, r.text
        async with app.state.ctx.sessions() as db:
            key = await db.scalar(select(Build.storage_key).where(Build.id == r.json()["buildId"]))
        assert key is not None
        return key

    return StorageHarness(storage, client, clock, put, uploadable_key)


MOTO_IGNORES_SIGNATURES = (
    "moto's S3 server does not check presigned URLs (expiry, signed Content-Length)"
)


@pytest.fixture
async def _s3_harness(s3_server: S3Server, clock: FrozenClock) -> AsyncIterator[StorageHarness]:
    storage = S3Storage(
        s3_server.new_bucket(),
        prefix="builds",
        endpoint_url=s3_server.endpoint_url,
        region=S3_REGION,
        clock=clock.now,
    )
    async with httpx.AsyncClient(timeout=30) as http:

        async def put(key: str, data: bytes) -> None:
            target = await storage.upload_target(key, len(data), clock.now() + HOUR, None)
            r = await http.put(target.url, content=data, headers=target.headers)
            assert r.status_code == 200, r.text

        async def uploadable_key(size: int) -> str:
            return new_key()

        yield StorageHarness(storage, http, clock, put, uploadable_key, MOTO_IGNORES_SIGNATURES)


@pytest.fixture(params=STORAGE_BACKENDS)
def harness(request: pytest.FixtureRequest) -> StorageHarness:
    value: StorageHarness = request.getfixturevalue(f"_{request.param}_harness")
    return value


@pytest.fixture
def signer() -> UrlSigner:
    return UrlSigner(b"storage-test-key-that-is-long-enough-0123456789")


@pytest.fixture
def local_root(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def local(local_root: Path, signer: UrlSigner) -> LocalStorage:
    """A LocalStorage on its own, for tests of what only the local backend does."""
    return LocalStorage(local_root, BASE_URL, signer)


def expiry(clock: FrozenClock, seconds: int) -> datetime:
    return clock.now() + timedelta(seconds=seconds)

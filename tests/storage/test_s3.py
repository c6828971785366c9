"""What only the S3 backend does: what its presigned URLs sign, S3's checksum, and its errors."""

from __future__ import annotations

import asyncio
import hashlib
import os
from datetime import timedelta
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from buildbay.app import create_app
from buildbay.builds.metadata import read_metadata
from buildbay.clock import FrozenClock
from buildbay.config import Settings
from buildbay.storage.base import ObjectNotFound, StorageUnavailable
from buildbay.storage.s3 import S3Storage, _hex_sha256
from tests.builds.test_metadata import ipa
from tests.conftest import BASE_URL, S3_CREDENTIALS, S3_REGION, S3Server, assert_problem
from tests.processes import free_port
from tests.storage.conftest import StorageHarness, new_key

ABC_SHA256 = hashlib.sha256(b"abc").hexdigest()
ABC_B64 = "ungWv48Bz+pBQUDeXa4iI7ADYaOWF3qctBD/YfIAFa0="  # the same digest as S3 writes it


def _query(url: str) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlsplit(url).query).items()}


@pytest.fixture
def s3(_s3_harness: StorageHarness) -> S3Storage:
    storage = _s3_harness.storage
    assert isinstance(storage, S3Storage)
    return storage


async def test_the_upload_url_signs_the_size_and_the_checksum_and_expires_with_the_link(
    s3: S3Storage, clock: FrozenClock
) -> None:
    digest = hashlib.sha256(b"abc").hexdigest()
    target = await s3.upload_target(new_key(), 3, clock.now() + timedelta(minutes=45), digest)

    query = _query(target.url)
    signed = query["X-Amz-SignedHeaders"].split(";")
    assert {"content-length", "content-type", "host", "x-amz-checksum-sha256"} <= set(signed)
    assert query["X-Amz-Expires"] == str(45 * 60)
    assert target.headers["x-amz-checksum-sha256"] == ABC_B64


async def test_without_a_declared_sha256_no_checksum_header_is_asked_for(
    s3: S3Storage, clock: FrozenClock
) -> None:
    target = await s3.upload_target(new_key(), 3, clock.now() + timedelta(hours=1), None)

    assert target.headers == {"Content-Type": "application/octet-stream"}
    assert "checksum" not in _query(target.url)["X-Amz-SignedHeaders"]


async def test_with_a_declared_sha256_the_upload_and_verify_need_no_read_of_the_object(
    s3: S3Storage, clock: FrozenClock
) -> None:
    key, data = new_key(), os.urandom(50_000)
    digest = hashlib.sha256(data).hexdigest()
    target = await s3.upload_target(key, len(data), clock.now() + timedelta(hours=1), digest)
    async with httpx.AsyncClient() as http:
        r = await http.put(target.url, content=data, headers=target.headers)
    assert r.status_code == 200, r.text

    info = await s3.stat(key)
    assert info is not None
    # AWS S3 keeps the checksum it checked and HEAD returns it; moto's server keeps none from a
    # presigned PUT, and verify then reads the object through the hash instead.
    assert info.sha256 in (digest, None)
    assert (await s3.compute_digests(key)).sha256 == digest


@pytest.mark.parametrize(
    ("head", "expected"),
    [
        ({"ChecksumSHA256": ABC_B64}, ABC_SHA256),
        (
            {
                "ChecksumSHA256": ABC_B64,
                "ChecksumType": "FULL_OBJECT",
            },
            ABC_SHA256,
        ),
        ({"ChecksumSHA256": "ungWv48Bz+pBQUDeXa4iI7ADYaOWF3qctBD/YfIAFa0=-3"}, None),
        ({"ChecksumSHA256": "abc", "ChecksumType": "COMPOSITE"}, None),
        ({"ChecksumSHA256": "not base64!"}, None),
        ({}, None),
    ],
    ids=["full object", "typed full object", "multipart", "composite", "garbage", "none"],
)
def test_only_a_full_object_checksum_is_taken_as_the_files_sha256(
    head: dict[str, str], expected: str | None
) -> None:
    assert _hex_sha256(head) == expected


async def test_the_download_url_names_the_file_even_when_it_is_not_ascii(
    s3: S3Storage, clock: FrozenClock
) -> None:
    key = new_key()
    target = await s3.upload_target(key, 5, clock.now() + timedelta(hours=1), None)
    async with httpx.AsyncClient() as http:
        assert (await http.put(target.url, content=b"bytes", headers=target.headers)).is_success
    url = await s3.download_url(key, "Café build 1.apk", clock.now() + timedelta(minutes=5))
    assert _query(url)["X-Amz-Expires"] == "300"

    async with httpx.AsyncClient() as http:
        r = await http.get(url)
    assert r.status_code == 200
    assert (
        r.headers["content-disposition"] == "attachment; filename*=utf-8''Caf%C3%A9%20build%201.apk"
    )


async def test_an_unreachable_bucket_is_storage_unavailable(
    clock: FrozenClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Credentials of its own: presigning needs some, and no moto server set them when this
    # test runs first (alone, or first of its worker).
    for name, value in S3_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    storage = S3Storage(
        "nowhere",
        endpoint_url=f"http://127.0.0.1:{free_port()}",  # nothing listens there
        region=S3_REGION,
        clock=clock.now,
    )
    with pytest.raises(StorageUnavailable):
        await storage.check()
    with pytest.raises(StorageUnavailable):
        await storage.stat(new_key())
    # Presigning is local: links can still be made (a client would find the bucket down).
    assert (await storage.upload_target(new_key(), 1, clock.now() + timedelta(hours=1), None)).url


async def test_a_missing_bucket_is_storage_unavailable_not_a_missing_object(
    s3_server: S3Server, clock: FrozenClock
) -> None:
    storage = S3Storage(
        "no-such-bucket", endpoint_url=s3_server.endpoint_url, region=S3_REGION, clock=clock.now
    )
    with pytest.raises(StorageUnavailable):
        await storage.check()
    with pytest.raises((StorageUnavailable, ObjectNotFound)):
        await storage.compute_digests(new_key())


async def test_readyz_fails_while_the_bucket_is_unreachable(
    settings: Settings, clock: FrozenClock
) -> None:
    storage = S3Storage(
        "nowhere", endpoint_url=f"http://127.0.0.1:{free_port()}", region=S3_REGION, clock=clock.now
    )
    app = create_app(settings, clock=clock, storage=storage, migrate_on_start=False)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as client:
        r = await client.get("/readyz")
    await app.state.ctx.dispose()
    problem = assert_problem(r, 503, "not_ready")
    assert problem["checks"] == {"database": "ok", "storage": "failing"}
    assert r.headers["retry-after"] == "5"


async def test_in_a_versioned_bucket_a_put_after_verify_cannot_change_the_build(
    settings: Settings, clock: FrozenClock, s3_server: S3Server
) -> None:
    storage = S3Storage(
        s3_server.new_bucket(versioned=True),
        endpoint_url=s3_server.endpoint_url,
        region=S3_REGION,
        clock=clock.now,
    )
    app = create_app(settings, clock=clock, storage=storage, migrate_on_start=False)
    verified, later = b"the verified build", b"bytes PUT after verify"
    transport = httpx.ASGITransport(app=app)
    async with (
        httpx.AsyncClient(transport=transport, base_url=BASE_URL) as api,
        httpx.AsyncClient() as bucket,
    ):
        r = await api.post(
            "/api/auth/register", json={"email": "v@example.com", "password": "pw-123456"}
        )
        auth = {"Authorization": f"Bearer {r.json()['access_token']}"}
        project = (await api.post("/api/projects", json={"name": "P"}, headers=auth)).json()["id"]
        app_id = (
            await api.post(
                f"/api/projects/{project}/applications", json={"name": "A"}, headers=auth
            )
        ).json()["id"]
        builds = f"/api/app-distribution/{project}/{app_id}/builds"
        link = (
            await api.post(
                f"{builds}/upload-link",
                json={"fileName": "a.apk", "fileSize": len(verified)},
                headers=auth,
            )
        ).json()
        assert (
            await bucket.put(link["uploadUrl"], content=verified, headers=link["uploadHeaders"])
        ).is_success
        r = await api.post(f"{builds}/verify", json={"buildId": link["buildId"]}, headers=auth)
        assert r.status_code == 200, r.text

        # The upload URL is still valid and the bucket takes the PUT (same size: S3 signs it).
        replaced = later[: len(verified)].ljust(len(verified), b"!")
        assert (
            await bucket.put(link["uploadUrl"], content=replaced, headers=link["uploadHeaders"])
        ).is_success

        download = await api.get(f"{builds}/{link['buildId']}/download", headers=auth)
        assert download.status_code == 302
        served = await bucket.get(download.headers["location"])
    await app.state.ctx.dispose()
    assert served.content == verified
    assert r.json()["sha256"] == hashlib.sha256(verified).hexdigest()


async def test_an_ipa_in_the_bucket_is_read_with_ranged_gets(
    s3: S3Storage, clock: FrozenClock
) -> None:
    data = ipa(extra={"Assets.car": os.urandom(2 * 1024 * 1024)}).getvalue()  # the asset: unread
    key = new_key()
    target = await s3.upload_target(key, len(data), clock.now() + timedelta(hours=1), None)
    async with httpx.AsyncClient() as http:
        assert (await http.put(target.url, content=data, headers=target.headers)).is_success

    ranges: list[str] = []
    s3._client.meta.events.register(
        "before-call.s3.GetObject", lambda params, **_: ranges.append(params["headers"]["Range"])
    )
    reading = await asyncio.to_thread(
        read_metadata, lambda: s3.open_reader(key, len(data)), "Example.ipa"
    )

    assert reading.error is None
    metadata = reading.metadata
    assert metadata is not None
    assert metadata["bundleId"] == "com.example.app"
    fetched = sum(int(r.split("-")[1]) - int(r.split("=")[1].split("-")[0]) + 1 for r in ranges)
    assert fetched < len(data) / 2  # the directory and Info.plist, not the 2 MiB asset

"""The multipart part of the storage contract, on every backend (local disk, S3 through moto):
parts PUT to the backend's part addresses, listed once whole, joined without a copy, aborted,
and found by the sweeper."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from datetime import timedelta

import httpx
import pytest
from fastapi import FastAPI

from buildbay.app import create_app
from buildbay.builds.sweeper import GRACE, sweep_orphan_multipart_uploads
from buildbay.clock import FrozenClock
from buildbay.config import Settings, StorageKind
from buildbay.storage.base import PartsMissing, UploadGone
from buildbay.storage.s3 import S3Storage
from tests.conftest import BASE_URL, S3_REGION, Api, S3Server
from tests.storage.conftest import HOUR, StorageHarness

MiB = 1024 * 1024
PART = 8 * MiB  # the server's smallest part; S3 refuses parts under 5 MiB but the last
DATA = (hashlib.sha256(b"seed").digest() * (MiB // 32)) * 9 + b"tail"  # 9 MiB + 4: two parts


def part(number: int) -> bytes:
    return DATA[(number - 1) * PART : number * PART]


async def send(harness: StorageHarness, key: str, upload_id: str, number: int) -> None:
    body = part(number)
    expires = harness.clock.now() + HOUR
    target = await harness.storage.part_target(key, upload_id, number, len(body), expires)
    r = await harness.http.put(target.url, content=body, headers=target.headers)
    assert r.status_code == 200, r.text


async def test_parts_are_listed_once_whole_and_joined_into_the_object(
    harness: StorageHarness,
) -> None:
    key = await harness.uploadable_key(len(DATA))
    upload_id = await harness.storage.start_multipart(key, len(DATA), PART)

    await send(harness, key, upload_id, 2)
    listed = await harness.storage.list_parts(key, upload_id)
    assert [(p.number, p.size) for p in listed] == [(2, len(part(2)))]
    await send(harness, key, upload_id, 1)
    await harness.storage.complete_multipart(key, upload_id, len(DATA), PART)

    info = await harness.storage.stat(key)
    assert info is not None
    assert info.size == len(DATA)
    digest = info.sha256 or (await harness.storage.compute_digests(key, info.version)).sha256
    assert digest == hashlib.sha256(DATA).hexdigest()
    with pytest.raises(UploadGone):
        await harness.storage.list_parts(key, upload_id)


async def test_joining_with_a_part_missing_names_it(harness: StorageHarness) -> None:
    key = await harness.uploadable_key(len(DATA))
    upload_id = await harness.storage.start_multipart(key, len(DATA), PART)
    await send(harness, key, upload_id, 2)

    with pytest.raises(PartsMissing) as refused:
        await harness.storage.complete_multipart(key, upload_id, len(DATA), PART)

    assert refused.value.extensions == {"missingParts": [1]}
    assert refused.value.code == "upload_incomplete"
    assert await harness.storage.stat(key) is None


async def test_an_aborted_upload_is_gone_with_its_parts(harness: StorageHarness) -> None:
    key = await harness.uploadable_key(len(DATA))
    upload_id = await harness.storage.start_multipart(key, len(DATA), PART)
    await send(harness, key, upload_id, 1)

    await harness.storage.abort_multipart(key, upload_id)
    await harness.storage.abort_multipart(key, upload_id)  # again: not an error

    with pytest.raises(UploadGone):
        await harness.storage.list_parts(key, upload_id)
    later = harness.clock.now() + timedelta(days=1)
    listed = [u async for page in harness.storage.multipart_uploads(later) for u in page]
    assert all(u.key != key for u in listed)


async def test_uploads_are_listed_for_the_sweeper_once_old_enough(
    harness: StorageHarness,
) -> None:
    key = await harness.uploadable_key(len(DATA))
    upload_id = await harness.storage.start_multipart(key, len(DATA), PART)

    before = harness.clock.now() - timedelta(hours=1)
    # moto answers a fixed Initiated date (2010) for every upload: only "old enough" shows there.
    assert isinstance(harness.storage, S3Storage) or not [
        u async for page in harness.storage.multipart_uploads(before) for u in page if u.key == key
    ]
    later = harness.clock.now() + timedelta(days=1)
    found = [u async for page in harness.storage.multipart_uploads(later) for u in page]
    assert [(u.key, u.upload_id) for u in found if u.key == key] == [(key, upload_id)]


@pytest.fixture
def s3(_s3_harness: StorageHarness) -> S3Storage:
    storage = _s3_harness.storage
    assert isinstance(storage, S3Storage)
    return storage


async def test_the_part_address_signs_the_part_and_its_exact_size(
    s3: S3Storage, clock: FrozenClock
) -> None:
    target = await s3.part_target("p/a/b", "upload-1", 3, PART, clock.now() + HOUR)

    assert "partNumber=3" in target.url
    assert "uploadId=upload-1" in target.url
    assert "content-length" in target.url.lower()  # among X-Amz-SignedHeaders
    assert target.headers == {}


# -- S3 end to end: the API hands out presigned part addresses; the bytes skip the server -------


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


async def test_a_build_in_parts_on_s3_verifies_and_the_sweeper_aborts_orphans(
    s3_app: FastAPI, clock: FrozenClock
) -> None:
    transport = httpx.ASGITransport(app=s3_app)
    async with (
        httpx.AsyncClient(transport=transport, base_url=BASE_URL) as client,
        httpx.AsyncClient(timeout=30) as bucket,
    ):
        api = Api(client)
        owner = await api.register()
        project = await api.project(owner)
        application = await api.application(owner, project["id"])
        base = f"/api/app-distribution/{project['id']}/{application['id']}/builds"
        sha256 = hashlib.sha256(DATA).hexdigest()
        r = await client.post(
            f"{base}/upload-link",
            json={
                "fileName": "big.bin",
                "fileSize": len(DATA),
                "sha256": sha256,
                "multipart": True,
            },
            headers=owner.headers,
        )
        assert r.status_code == 201, r.text
        build_id = r.json()["buildId"]
        r = await client.post(
            f"{base}/{build_id}/parts", json={"partNumbers": [2, 1]}, headers=owner.headers
        )
        assert r.status_code == 200, r.text
        for target in r.json()["parts"]:
            assert target["url"].startswith(s3_app.state.ctx.settings.s3_endpoint_url)
            body = part(target["partNumber"])
            put = await bucket.put(target["url"], content=body, headers=target["headers"])
            assert put.status_code == 200, put.text
        r = await client.get(f"{base}/{build_id}/parts", headers=owner.headers)
        assert [p["partNumber"] for p in r.json()["parts"]] == [1, 2]

        r = await client.post(f"{base}/verify", json={"buildId": build_id}, headers=owner.headers)
        assert r.status_code == 200, r.text
        assert r.json()["sha256"] == sha256

        # An upload begun in the bucket that no build owns (its row gone) goes once old.
        storage = s3_app.state.ctx.storage
        orphan = await storage.start_multipart("prj_x/app_x/bld_gone", len(DATA), PART)
        clock.advance(seconds=GRACE.total_seconds() + 60)
        aborted = await sweep_orphan_multipart_uploads(
            s3_app.state.ctx.sessions, storage, clock.now()
        )
        assert aborted == 1
        with pytest.raises(UploadGone):
            await storage.list_parts("prj_x/app_x/bld_gone", orphan)


async def test_a_build_in_parts_on_s3_is_sent_again_after_a_checksum_mismatch(
    s3_app: FastAPI,
) -> None:
    transport = httpx.ASGITransport(app=s3_app)
    async with (
        httpx.AsyncClient(transport=transport, base_url=BASE_URL) as client,
        httpx.AsyncClient(timeout=30) as bucket,
    ):
        api = Api(client)
        owner = await api.register()
        project = await api.project(owner)
        application = await api.application(owner, project["id"])
        base = f"/api/app-distribution/{project['id']}/{application['id']}/builds"
        sha256 = hashlib.sha256(DATA).hexdigest()
        r = await client.post(
            f"{base}/upload-link",
            json={"fileName": "big.bin", "fileSize": len(DATA), "sha256": sha256,
                  "multipart": True},
            headers=owner.headers,
        )  # fmt: skip
        assert r.status_code == 201, r.text
        build_id = r.json()["buildId"]

        async def send_parts(corrupt: int | None) -> list[dict[str, str]]:
            r = await client.post(
                f"{base}/{build_id}/parts", json={"partNumbers": [1, 2]}, headers=owner.headers
            )
            assert r.status_code == 200, r.text
            targets: list[dict[str, str]] = r.json()["parts"]
            for target in targets:
                body = bytearray(part(int(target["partNumber"])))
                if target["partNumber"] == corrupt:
                    body[10] ^= 0xFF
                put = await bucket.put(target["url"], content=bytes(body),
                                       headers=target["headers"])  # fmt: skip
                assert put.status_code == 200, put.text
            return targets

        first = await send_parts(corrupt=2)
        r = await client.post(f"{base}/verify", json={"buildId": build_id}, headers=owner.headers)
        assert r.status_code == 422, r.text
        assert r.json()["code"] == "checksum_mismatch"
        r = await client.get(f"{base}/{build_id}/parts", headers=owner.headers)
        assert r.status_code == 200, r.text
        assert (r.json()["parts"], r.json()["partsCount"]) == ([], 2)
        # The refused upload is over: its addresses take nothing more (S3 answers 404
        # NoSuchUpload, moto 500), and ask for new ones.
        stale = await bucket.put(first[0]["url"], content=part(1), headers=first[0]["headers"])
        assert stale.status_code in (404, 500), stale.text
        r = await client.get(f"{base}/{build_id}/parts", headers=owner.headers)
        assert r.json()["parts"] == []

        await send_parts(corrupt=None)
        r = await client.get(f"{base}/{build_id}/parts", headers=owner.headers)
        assert [p["partNumber"] for p in r.json()["parts"]] == [1, 2]
        r = await client.post(f"{base}/verify", json={"buildId": build_id}, headers=owner.headers)
        assert r.status_code == 200, r.text
        assert (r.json()["status"], r.json()["sha256"]) == ("ready", sha256)
        download = await client.get(r.json()["downloadUrl"], headers=owner.headers)
        assert download.status_code in (302, 307), download.text
        stored = await bucket.get(download.headers["location"])
        assert stored.status_code == 200
        assert stored.content == DATA

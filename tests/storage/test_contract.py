"""The Storage contract, run against every implementation (see STORAGE_BACKENDS in conftest)."""

from __future__ import annotations

import base64
import hashlib
import io
import os
from datetime import UTC, datetime, timedelta

import pytest

from buildbay.storage.base import LIST_PAGE, ObjectNotFound
from tests.storage.conftest import StorageHarness, expiry, new_key


async def test_stat_of_an_absent_key_is_none(harness: StorageHarness) -> None:
    assert await harness.storage.stat(new_key()) is None


async def test_stored_object_reports_its_size_and_sha256(harness: StorageHarness) -> None:
    key, data = new_key(), os.urandom(200_000)

    await harness.put(key, data)

    info = await harness.storage.stat(key)
    assert info is not None
    assert info.size == len(data)
    assert info.sha256 in (None, hashlib.sha256(data).hexdigest())


async def test_compute_digests_equals_hashlib(harness: StorageHarness) -> None:
    key, data = new_key(), os.urandom(3 * 1024 * 1024 + 17)
    await harness.put(key, data)

    digests = await harness.storage.compute_digests(key)

    assert digests.sha256 == hashlib.sha256(data).hexdigest()
    assert digests.sha512 == base64.b64encode(hashlib.sha512(data).digest()).decode()


async def test_compute_digests_of_an_absent_key_raises_object_not_found(
    harness: StorageHarness,
) -> None:
    with pytest.raises(ObjectNotFound):
        await harness.storage.compute_digests(new_key())


async def test_delete_removes_the_object(harness: StorageHarness) -> None:
    key, other = new_key(), new_key()
    await harness.put(key, b"doomed")
    await harness.put(other, b"kept")

    await harness.storage.delete(key)

    assert await harness.storage.stat(key) is None
    with pytest.raises(ObjectNotFound):
        await harness.storage.compute_digests(key)
    kept = await harness.storage.stat(other)
    assert kept is not None
    assert kept.size == len(b"kept")


async def test_deleting_an_absent_object_is_not_an_error(harness: StorageHarness) -> None:
    key = new_key()
    await harness.storage.delete(key)
    await harness.put(key, b"once")
    await harness.storage.delete(key)
    await harness.storage.delete(key)

    assert await harness.storage.stat(key) is None


async def test_delete_prefix_removes_every_object_under_it_and_nothing_else(
    harness: StorageHarness,
) -> None:
    doomed = ["p1/a1/b1", "p1/a1/b2", "p1/a2/b3"]
    kept = ["p10/a1/b1", "p2/a1/b1"]
    for key in doomed + kept:
        await harness.put(key, key.encode())

    await harness.storage.delete_prefix("p1/")

    for key in doomed:
        assert await harness.storage.stat(key) is None, key
    for key in kept:
        info = await harness.storage.stat(key)
        assert info is not None, key
        assert info.size == len(key)


async def test_delete_prefix_of_an_application_keeps_its_siblings(
    harness: StorageHarness,
) -> None:
    await harness.put("p1/a1/b1", b"one")
    await harness.put("p1/a10/b2", b"ten")

    await harness.storage.delete_prefix("p1/a1/")

    assert await harness.storage.stat("p1/a1/b1") is None
    assert await harness.storage.stat("p1/a10/b2") is not None


async def test_delete_prefix_with_nothing_under_it_is_not_an_error(
    harness: StorageHarness,
) -> None:
    await harness.storage.delete_prefix(f"{new_key()}/")


async def test_check_passes_on_a_working_backend(harness: StorageHarness) -> None:
    await harness.storage.check()


async def test_upload_url_takes_the_bytes_and_download_url_serves_them(
    harness: StorageHarness,
) -> None:
    data = os.urandom(100_000)
    key = await harness.uploadable_key(len(data))
    digest = hashlib.sha256(data).hexdigest()

    target = await harness.storage.upload_target(
        key, len(data), expiry(harness.clock, 3600), digest
    )
    assert target.method == "PUT"
    assert target.headers["Content-Type"] == "application/octet-stream"
    r = await harness.http.request(target.method, target.url, content=data, headers=target.headers)
    assert r.status_code == 200, r.text

    info = await harness.storage.stat(key)
    assert info is not None
    assert info.size == len(data)
    assert (await harness.storage.compute_digests(key)).sha256 == digest

    url = await harness.storage.download_url(key, "app-release.apk", expiry(harness.clock, 300))
    r = await harness.http.get(url)
    assert r.status_code == 200
    assert r.content == data
    assert 'filename="app-release.apk"' in r.headers["content-disposition"]


async def test_download_url_stops_working_when_it_expires(harness: StorageHarness) -> None:
    if harness.unsigned_reason:
        pytest.skip(harness.unsigned_reason)
    key = new_key()
    await harness.put(key, b"bytes")
    url = await harness.storage.download_url(key, "a.bin", expiry(harness.clock, 300))

    harness.clock.advance(seconds=301)

    r = await harness.http.get(url)
    assert r.status_code == 403  # the body is the backend's own (problem+json locally, S3 XML)


async def test_upload_url_is_refused_for_a_different_size(harness: StorageHarness) -> None:
    if harness.unsigned_reason:
        pytest.skip(harness.unsigned_reason)
    key = await harness.uploadable_key(10)
    target = await harness.storage.upload_target(key, 10, expiry(harness.clock, 3600), None)

    r = await harness.http.put(target.url, content=b"x" * 11, headers=target.headers)

    assert r.status_code in (400, 403, 413), r.text
    assert await harness.storage.stat(key) is None


async def test_a_key_prefix_is_not_an_object(harness: StorageHarness) -> None:
    await harness.put("p1/a1/b1", b"the only object")

    for prefix in ("p1", "p1/a1"):
        assert await harness.storage.stat(prefix) is None
        with pytest.raises(ObjectNotFound):
            await harness.storage.compute_digests(prefix)
        await harness.storage.delete(prefix)

    assert (await harness.storage.compute_digests("p1/a1/b1")).sha256 == hashlib.sha256(
        b"the only object"
    ).hexdigest()


async def _listed(harness: StorageHarness, modified_before: datetime) -> list[list[str]]:
    return [page async for page in harness.storage.stored_keys(modified_before)]


async def test_stored_keys_lists_every_object_written_before_the_cutoff(
    harness: StorageHarness,
) -> None:
    keys = ["p1/a1/b1", "p1/a2/b2", "p2/a1/b3"]
    for key in keys:
        await harness.put(key, key.encode())
    await harness.storage.delete("p1/a2/b2")

    pages = await _listed(harness, datetime.now(UTC) + timedelta(minutes=1))

    assert all(0 < len(page) <= LIST_PAGE for page in pages)
    assert sorted(key for page in pages for key in page) == ["p1/a1/b1", "p2/a1/b3"]


async def test_stored_keys_leaves_out_objects_written_since_the_cutoff(
    harness: StorageHarness,
) -> None:
    await harness.put("p1/a1/b1", b"fresh")

    assert await _listed(harness, datetime.now(UTC) - timedelta(minutes=1)) == []


async def test_stored_keys_of_an_empty_store_is_nothing(harness: StorageHarness) -> None:
    assert await _listed(harness, datetime.now(UTC) + timedelta(minutes=1)) == []


async def test_put_stores_what_the_server_wrote_itself(harness: StorageHarness) -> None:
    data = os.urandom(3 * 1024 * 1024 + 7)  # more than one block
    key = f"feedback/{new_key()}.png"
    source = io.BytesIO(data)
    source.seek(100)  # read from the start, wherever the file stands

    await harness.storage.put(key, source, len(data), "image/png")

    info = await harness.storage.stat(key)
    assert info is not None
    assert info.size == len(data)
    assert (await harness.storage.compute_digests(key)).sha256 == hashlib.sha256(data).hexdigest()
    await harness.storage.delete(key)
    assert await harness.storage.stat(key) is None


async def test_view_url_serves_an_object_inline_or_says_the_api_must(
    harness: StorageHarness,
) -> None:
    key = f"feedback/{new_key()}.png"
    data = b"\x89PNG pixels"
    await harness.storage.put(key, io.BytesIO(data), len(data), "image/png")

    url = await harness.storage.view_url(key, "shot.png", "image/png", expiry(harness.clock, 60))

    if url is None:  # the local disk: the API process serves it from open_reader
        with harness.storage.open_reader(key, len(data)) as reader:
            assert reader.read() == data
        return
    r = await harness.http.get(url)
    assert r.status_code == 200
    assert r.content == data
    assert r.headers["content-type"] == "image/png"
    assert r.headers["content-disposition"].startswith("inline")

"""Large builds in parts (issue 17) on local storage: the upload link's plan, part addresses, the
parts that arrived, verify joining them (inline, or in the background for a large file), abort
and the sweep. Part sizes are the server's smallest (8 MiB), so the files here are a few tens
of MiB."""

from __future__ import annotations

import asyncio
import errno
import hashlib
import json
import os
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from buildbay.builds.sweeper import GRACE, sweep
from buildbay.clock import FrozenClock
from buildbay.config import Settings
from buildbay.context import AppContext
from buildbay.storage.local import LocalStorage
from buildbay.storage.local_multipart import BOOT_ID
from tests.builds.conftest import Builds

MiB = 1024 * 1024
PART = 8 * MiB
INLINE_MAX = 16 * MiB  # above it, verify checks the bytes in the background


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return settings.model_copy(
        update={
            "verify_inline_max_bytes": INLINE_MAX,
            "max_upload_bytes_free": 20 * 1024**3,
            "quota_bytes_free": 0,
        }
    )


def file_of(size: int, seed: int = 1) -> bytes:
    block = hashlib.sha256(str(seed).encode()).digest() * (MiB // 32)
    return (block * (size // MiB + 1))[:size]


def part_of(data: bytes, number: int) -> bytes:
    return data[(number - 1) * PART : number * PART]


def ctx_of(app: FastAPI) -> AppContext:
    ctx: AppContext = app.state.ctx
    return ctx


class Parts:
    """The multipart steps of one application's builds."""

    def __init__(self, builds: Builds) -> None:
        self.builds = builds

    async def link(self, data: bytes, **fields: Any) -> dict[str, Any]:
        return await self.builds.link(data, multipart=True, **fields)

    async def targets(self, build_id: str, numbers: list[int]) -> httpx.Response:
        return await self.builds.client.post(
            f"{self.builds.base}/{build_id}/parts",
            json={"partNumbers": numbers},
            headers=self.builds.owner.headers,
        )

    async def target(self, build_id: str, number: int) -> dict[str, Any]:
        r = await self.targets(build_id, [number])
        assert r.status_code == 200, r.text
        target: dict[str, Any] = r.json()["parts"][0]
        return target

    async def put(self, build_id: str, number: int, body: Any) -> httpx.Response:
        target = await self.target(build_id, number)
        headers = target["headers"]
        return await self.builds.uploader.put(target["url"], content=body, headers=headers)

    async def received(self, build_id: str) -> dict[str, Any]:
        r = await self.builds.client.get(
            f"{self.builds.base}/{build_id}/parts", headers=self.builds.owner.headers
        )
        assert r.status_code == 200, r.text
        body: dict[str, Any] = r.json()
        return body

    async def send_all(self, build_id: str, data: bytes, order: list[int]) -> None:
        for number in order:
            r = await self.put(build_id, number, part_of(data, number))
            assert r.status_code == 200, r.text


@pytest.fixture
def parts(builds: Builds) -> Parts:
    return Parts(builds)


def upload_dir(app: FastAPI, builds: Builds, build_id: str) -> Path:
    storage = ctx_of(app).storage
    assert isinstance(storage, LocalStorage)
    return storage.root / "multipart" / builds.project_id / builds.app_id / build_id


async def verified_ready(app: FastAPI, builds: Builds, build_id: str, data: bytes) -> None:
    """Verify the build, in the background if it answers 202, and check it is ready with the
    sha256 of `data`."""
    r = await builds.verify(build_id)
    assert r.status_code in (200, 202), r.text
    jobs = ctx_of(app).jobs
    assert jobs is not None
    await jobs.run_until_idle()
    build = (await builds.get(build_id)).json()
    assert (build["status"], build["sha256"]) == ("ready", hashlib.sha256(data).hexdigest())


async def slowly(data: bytes, pause: asyncio.Event | None = None) -> AsyncIterator[bytes]:
    """`data` as a chunked body that lets other tasks run between chunks (and, given `pause`,
    waits for it halfway)."""
    for start in range(0, len(data), MiB):
        if pause is not None and start == len(data) // 2 // MiB * MiB:
            await pause.wait()
        yield data[start : start + MiB]
        await asyncio.sleep(0)


# -- the plan ----------------------------------------------------------------------------------


async def test_an_upload_link_in_parts_answers_the_plan_and_no_upload_url(
    parts: Parts, builds: Builds
) -> None:
    r = await builds.request_link(
        {"fileName": "big.apk", "fileSize": 20 * MiB + 5, "multipart": True}
    )

    assert r.status_code == 201, r.text
    body = r.json()
    assert body["uploadUrl"] is None
    assert body["multipart"] == {"partSize": PART, "partsCount": 3}


async def test_the_part_size_keeps_a_10_gib_file_within_10000_parts(builds: Builds) -> None:
    r = await builds.request_link(
        {"fileName": "big.apk", "fileSize": 10 * 1024**3, "multipart": True}
    )

    assert r.status_code == 201, r.text
    plan = r.json()["multipart"]
    assert plan["partSize"] >= PART
    assert plan["partsCount"] <= 10_000
    assert plan["partSize"] * plan["partsCount"] >= 10 * 1024**3


async def test_parts_are_refused_for_a_file_under_5_mib(builds: Builds) -> None:
    r = await builds.request_link({"fileName": "a.apk", "fileSize": 5 * MiB - 1, "multipart": True})

    assert r.status_code == 422, r.text
    assert r.json()["code"] == "multipart_too_small"


async def test_one_put_is_refused_for_a_file_over_5_gib(builds: Builds) -> None:
    r = await builds.request_link({"fileName": "a.apk", "fileSize": 5 * 1024**3 + 1})

    assert r.status_code == 422, r.text
    assert r.json()["code"] == "multipart_required"


async def test_part_addresses_are_refused_for_numbers_outside_the_upload(
    parts: Parts, builds: Builds
) -> None:
    link = await parts.link(file_of(20 * MiB))

    r = await parts.targets(link["buildId"], [1, 4])

    assert r.status_code == 422, r.text
    assert r.json()["errors"][0]["field"] == "partNumbers"


async def test_part_addresses_are_refused_for_a_build_uploaded_in_one_put(
    parts: Parts, builds: Builds
) -> None:
    link = await builds.link()

    r = await parts.targets(link["buildId"], [1])

    assert r.status_code == 409, r.text
    assert r.json()["code"] == "not_multipart"


async def test_more_than_100_part_numbers_are_refused(parts: Parts, builds: Builds) -> None:
    link = await parts.link(file_of(20 * MiB))

    r = await parts.targets(link["buildId"], list(range(1, 102)))

    assert r.status_code == 422, r.text


# -- parts -------------------------------------------------------------------------------------


async def test_parts_sent_out_of_order_verify_with_the_right_sha256(
    parts: Parts, builds: Builds
) -> None:
    data = file_of(12 * MiB + 3)
    sha256 = hashlib.sha256(data).hexdigest()
    link = await parts.link(data, sha256=sha256)

    await parts.send_all(link["buildId"], data, [2, 1])
    r = await builds.verify(link["buildId"])

    assert r.status_code == 200, r.text
    assert r.json()["status"] == "ready"
    assert r.json()["sha256"] == sha256
    assert r.json()["fileSize"] == len(data)


async def test_the_parts_that_arrived_are_listed_with_their_sizes(
    parts: Parts, builds: Builds
) -> None:
    data = file_of(20 * MiB + 7)
    link = await parts.link(data)

    await parts.send_all(link["buildId"], data, [3, 1])
    received = await parts.received(link["buildId"])

    assert received["partSize"] == PART
    assert received["partsCount"] == 3
    assert [(p["partNumber"], p["size"]) for p in received["parts"]] == [
        (1, PART),
        (3, 4 * MiB + 7),
    ]
    assert all(p["receivedAt"].endswith("Z") for p in received["parts"])


async def test_a_part_sent_twice_keeps_the_last_complete_copy(parts: Parts, builds: Builds) -> None:
    data = file_of(12 * MiB)
    link = await parts.link(data, sha256=hashlib.sha256(data).hexdigest())
    await parts.send_all(link["buildId"], data, [1, 2])

    r = await parts.put(link["buildId"], 1, file_of(PART, seed=99))  # other bytes
    assert r.status_code == 200, r.text
    r = await parts.put(link["buildId"], 1, part_of(data, 1))  # the right ones, last
    assert r.status_code == 200, r.text

    r = await builds.verify(link["buildId"])
    assert r.status_code == 200, r.text
    assert r.json()["sha256"] == hashlib.sha256(data).hexdigest()


async def test_after_a_checksum_mismatch_the_parts_are_missing_and_are_sent_again(
    app: FastAPI, parts: Parts, builds: Builds
) -> None:
    data = file_of(12 * MiB + 3)
    sha256 = hashlib.sha256(data).hexdigest()
    link = await parts.link(data, sha256=sha256)
    build_id = link["buildId"]
    corrupted = bytearray(part_of(data, 2))
    corrupted[1000] ^= 0xFF  # one bit flipped on the way
    old_addresses = [await parts.target(build_id, n) for n in (1, 2)]
    await parts.send_all(build_id, data, [1])
    assert (await parts.put(build_id, 2, bytes(corrupted))).status_code == 200

    r = await builds.verify(build_id)
    assert r.status_code == 422, r.text
    assert r.json()["code"] == "checksum_mismatch"
    assert f"not the declared {sha256}" in r.json()["detail"]
    build = (await builds.get(build_id)).json()
    assert (build["status"], build["failureCode"]) == ("pending", "checksum_mismatch")
    # Every part is missing again: which one was wrong, a whole-file sha256 cannot say.
    received = await parts.received(build_id)
    assert (received["parts"], received["partsCount"]) == ([], 2)
    r = await builds.verify(build_id)
    assert r.status_code == 422, r.text
    assert (r.json()["code"], r.json()["missingParts"]) == ("upload_incomplete", [1, 2])

    # Sent again (part 1 to a new address, part 2 to the one given before the mismatch).
    await parts.send_all(build_id, data, [1])
    resent = await builds.uploader.put(
        old_addresses[1]["url"], content=part_of(data, 2), headers=old_addresses[1]["headers"]
    )
    assert resent.status_code == 200, resent.text
    assert [p["partNumber"] for p in (await parts.received(build_id))["parts"]] == [1, 2]
    r = await builds.verify(build_id)
    assert r.status_code == 200, r.text
    assert (r.json()["status"], r.json()["sha256"]) == ("ready", sha256)
    assert not upload_dir(app, builds, build_id).exists()
    download = await builds.client.get(r.json()["downloadUrl"], headers=builds.owner.headers,
                                       follow_redirects=True)  # fmt: skip
    assert download.status_code == 200
    assert download.content == data


async def test_a_part_longer_than_its_size_is_refused(parts: Parts, builds: Builds) -> None:
    data = file_of(12 * MiB)
    link = await parts.link(data)

    r = await parts.put(link["buildId"], 1, part_of(data, 1) + b"x")

    assert r.status_code == 413, r.text
    assert r.json()["code"] == "upload_too_large"
    assert (await parts.received(link["buildId"]))["parts"] == []


async def test_a_part_shorter_than_its_size_is_refused(parts: Parts, builds: Builds) -> None:
    data = file_of(12 * MiB)
    link = await parts.link(data)

    r = await parts.put(link["buildId"], 2, part_of(data, 2)[:-1])

    assert r.status_code == 400, r.text
    assert r.json()["code"] == "upload_too_short"
    assert (await parts.received(link["buildId"]))["parts"] == []


async def test_a_copy_cut_short_keeps_nothing_of_the_part_even_a_whole_earlier_one(
    parts: Parts, builds: Builds
) -> None:
    data = file_of(12 * MiB)
    link = await parts.link(data)
    await parts.send_all(link["buildId"], data, [1, 2])

    # Chunked (no Content-Length): the shortfall shows only once the body ends.
    r = await parts.put(link["buildId"], 1, slowly(part_of(data, 1)[: 3 * MiB]))

    assert r.status_code == 400, r.text
    assert r.json()["code"] == "upload_too_short"
    listed = [p["partNumber"] for p in (await parts.received(link["buildId"]))["parts"]]
    assert listed == [2]  # the earlier copy of 1 was overwritten in part: it is gone
    r = await builds.verify(link["buildId"])
    assert r.status_code == 422, r.text
    assert r.json()["missingParts"] == [1]


async def test_a_failed_flush_at_verify_forgets_the_parts_so_no_retry_publishes_them(
    app: FastAPI, parts: Parts, builds: Builds, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Linux reports a failed write-back to one fsync only: a second verify would find the file
    flushed. The failed one forgets the parts instead, and they are sent again."""
    data = file_of(20 * MiB)
    link = await parts.link(data)
    await parts.send_all(link["buildId"], data, [1, 2, 3])
    real_fsync, failures = os.fsync, []

    def fsync_failing_once(fd: int) -> None:
        if not failures:
            failures.append(fd)
            raise OSError(errno.EIO, "Input/output error")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync_failing_once)

    failed = await builds.verify(link["buildId"])
    listed = (await parts.received(link["buildId"]))["parts"]
    again = await builds.verify(link["buildId"])

    assert failed.status_code == 503, failed.text
    assert listed == []
    assert again.status_code == 422, again.text
    assert again.json()["missingParts"] == [1, 2, 3]
    await parts.send_all(link["buildId"], data, [1, 2, 3])
    await verified_ready(app, builds, link["buildId"], data)


async def test_verify_names_the_missing_parts(parts: Parts, builds: Builds) -> None:
    data = file_of(20 * MiB)
    link = await parts.link(data)
    await parts.send_all(link["buildId"], data, [1])

    r = await builds.verify(link["buildId"])

    assert r.status_code == 422, r.text
    body = r.json()
    assert body["code"] == "upload_incomplete"
    assert body["missingParts"] == [2, 3]
    assert (await builds.get(link["buildId"])).json()["status"] == "pending"


@pytest.mark.skipif(BOOT_ID is None, reason="no boot id on this system")
async def test_a_part_marked_before_the_machine_restarted_is_sent_again(
    app: FastAPI, parts: Parts, builds: Builds
) -> None:
    """Parts are flushed at verify, not one by one: after a restart of the machine, a part
    marked in the earlier boot may have lost bytes, so it is listed as missing."""
    data = file_of(20 * MiB)
    link = await parts.link(data)
    await parts.send_all(link["buildId"], data, [1, 2, 3])
    marker = upload_dir(app, builds, link["buildId"]) / "parts" / "2"
    size, boot = marker.read_text().split(" ")
    assert boot == BOOT_ID
    marker.write_text(f"{size} {uuid.uuid4()}")  # as if written before a reboot

    listed = [p["partNumber"] for p in (await parts.received(link["buildId"]))["parts"]]
    r = await builds.verify(link["buildId"])

    assert listed == [1, 3]
    assert r.status_code == 422, r.text
    assert r.json()["missingParts"] == [2]
    await parts.send_all(link["buildId"], data, [2])
    await verified_ready(app, builds, link["buildId"], data)


async def test_two_clients_racing_on_one_part_leave_one_whole_copy(
    app: FastAPI, parts: Parts, builds: Builds
) -> None:
    data = file_of(12 * MiB)
    link = await parts.link(data)
    await parts.send_all(link["buildId"], data, [2])
    first, second = file_of(PART, seed=5), file_of(PART, seed=6)
    target = await parts.target(link["buildId"], 1)

    answers = await asyncio.gather(
        *(
            builds.uploader.put(target["url"], content=slowly(copy), headers=target["headers"])
            for copy in (first, second)
        )
    )

    assert [a.status_code for a in answers] == [200, 200]
    r = await builds.verify(link["buildId"])
    assert r.status_code == 200, r.text
    stored = r.json()["sha256"]
    assert stored in {
        hashlib.sha256(copy + part_of(data, 2)).hexdigest() for copy in (first, second)
    }


async def test_verify_while_a_part_is_arriving_names_it_missing_then_succeeds_after(
    parts: Parts, builds: Builds
) -> None:
    data = file_of(12 * MiB)
    link = await parts.link(data, sha256=hashlib.sha256(data).hexdigest())
    await parts.send_all(link["buildId"], data, [1])
    target = await parts.target(link["buildId"], 2)
    halfway = asyncio.Event()
    sending = asyncio.create_task(
        builds.uploader.put(
            target["url"], content=slowly(part_of(data, 2), halfway), headers=target["headers"]
        )
    )
    await asyncio.sleep(0.05)  # the part's first half is in

    r = await builds.verify(link["buildId"])
    assert r.status_code == 422, r.text
    assert r.json()["missingParts"] == [2]

    halfway.set()
    assert (await sending).status_code == 200
    r = await builds.verify(link["buildId"])
    assert r.status_code == 200, r.text
    assert r.json()["sha256"] == hashlib.sha256(data).hexdigest()


async def test_a_part_after_verify_is_refused(parts: Parts, builds: Builds) -> None:
    data = file_of(12 * MiB)
    link = await parts.link(data)
    await parts.send_all(link["buildId"], data, [1, 2])
    target = await parts.target(link["buildId"], 2)
    assert (await builds.verify(link["buildId"])).status_code == 200

    r = await builds.uploader.put(target["url"], content=part_of(data, 2))

    assert r.status_code == 409, r.text
    assert r.json()["code"] == "build_already_verified"
    r = await parts.targets(link["buildId"], [1])
    assert r.status_code == 409, r.text


async def test_a_part_address_is_bound_to_its_part(parts: Parts, builds: Builds) -> None:
    data = file_of(12 * MiB)
    link = await parts.link(data)
    target = await parts.target(link["buildId"], 1)

    r = await builds.uploader.put(target["url"].replace("part=1", "part=2"), content=b"x")

    assert r.status_code == 403, r.text
    assert r.json()["code"] == "invalid_signature"


async def test_parts_are_written_into_one_sparse_file(
    app: FastAPI, parts: Parts, builds: Builds
) -> None:
    data = file_of(20 * MiB)
    link = await parts.link(data)

    await parts.send_all(link["buildId"], data, [3])

    stored = upload_dir(app, builds, link["buildId"]) / "data"
    assert stored.stat().st_size == len(data)
    assert stored.stat().st_blocks * 512 < 8 * MiB  # parts 1 and 2 take no space yet


# -- verify in the background ------------------------------------------------------------------


async def test_a_large_file_verifies_in_the_background(
    app: FastAPI, parts: Parts, builds: Builds
) -> None:
    data = file_of(20 * MiB)
    sha256 = hashlib.sha256(data).hexdigest()
    link = await parts.link(data, sha256=sha256)
    await parts.send_all(link["buildId"], data, [1, 2, 3])

    r = await builds.verify(link["buildId"], notes="big one")

    assert r.status_code == 202, r.text
    assert r.json()["status"] == "processing"
    assert (await builds.verify(link["buildId"])).status_code == 202  # again: the same
    assert (await builds.get(link["buildId"])).json()["status"] == "processing"
    jobs = ctx_of(app).jobs
    assert jobs is not None
    await jobs.run_until_idle()
    build = (await builds.get(link["buildId"])).json()
    assert build["status"] == "ready"
    assert build["sha256"] == sha256
    assert build["notes"] == "big one"
    assert build["channels"] == ["default"]
    assert build["failureCode"] is None


async def test_a_large_file_with_the_wrong_sha256_fails_in_the_background(
    app: FastAPI, parts: Parts, builds: Builds
) -> None:
    data = file_of(20 * MiB)
    link = await parts.link(data, sha256="0" * 64)
    await parts.send_all(link["buildId"], data, [1, 2, 3])

    assert (await builds.verify(link["buildId"])).status_code == 202
    jobs = ctx_of(app).jobs
    assert jobs is not None
    await jobs.run_until_idle()

    build = (await builds.get(link["buildId"])).json()
    assert build["status"] == "failed"
    assert build["failureCode"] == "checksum_mismatch"
    assert "sha256" in build["metadataError"]
    r = await builds.verify(link["buildId"])
    assert r.status_code == 422, r.text
    assert r.json()["code"] == "checksum_mismatch"


# -- abort and sweep ---------------------------------------------------------------------------


async def test_deleting_a_pending_build_aborts_its_upload(
    app: FastAPI, parts: Parts, builds: Builds
) -> None:
    data = file_of(12 * MiB)
    link = await parts.link(data)
    await parts.send_all(link["buildId"], data, [1])
    target = await parts.target(link["buildId"], 2)

    r = await builds.client.delete(f"{builds.base}/{link['buildId']}", headers=builds.owner.headers)

    assert r.status_code == 204, r.text
    assert not upload_dir(app, builds, link["buildId"]).exists()
    r = await builds.uploader.put(target["url"], content=part_of(data, 2))
    assert r.status_code == 404, r.text


async def test_the_sweeper_aborts_uploads_whose_link_expired(
    app: FastAPI, parts: Parts, builds: Builds, clock: FrozenClock
) -> None:
    data = file_of(12 * MiB)
    expired = await parts.link(data)
    await parts.send_all(expired["buildId"], data, [1])
    ctx = ctx_of(app)

    clock.advance(seconds=ctx.settings.multipart_upload_ttl_seconds)
    clock.advance(seconds=GRACE.total_seconds() + 1)
    builds.owner = await builds.api.login(builds.owner)  # a day later: a new session
    live = await parts.link(data)  # begun now: the sweep leaves it alone
    swept = await sweep(ctx.sessions, ctx.storage, clock.now(), ctx.settings.resolved_public_url)

    assert swept.expired_uploads == 1
    assert not upload_dir(app, builds, expired["buildId"]).exists()
    assert upload_dir(app, builds, live["buildId"]).exists()
    assert (await builds.get(expired["buildId"])).status_code == 404


async def test_the_sweeper_aborts_uploads_no_build_owns(
    app: FastAPI, builds: Builds, clock: FrozenClock
) -> None:
    ctx = ctx_of(app)
    key = f"{builds.project_id}/{builds.app_id}/bld_orphan"
    await ctx.storage.start_multipart(key, 20 * MiB, PART)
    orphan = upload_dir(app, builds, "bld_orphan")
    old = (clock.now() - GRACE - timedelta(minutes=1)).timestamp()
    os.utime(orphan / "meta.json", (old, old))

    swept = await sweep(ctx.sessions, ctx.storage, clock.now(), ctx.settings.resolved_public_url)

    assert swept.orphan_uploads == 1
    assert not orphan.exists()


@pytest.mark.parametrize(
    "order",
    [[1, 2, 3], [3, 2, 1], [2, 1, 3]],
    ids=["in order: each hashed on the way in", "reversed: read back", "mixed"],
)
async def test_parts_hashed_as_they_arrive_spare_verify_a_second_read(
    app: FastAPI, parts: Parts, builds: Builds, order: list[int]
) -> None:
    data = file_of(20 * MiB + 1)
    link = await parts.link(data)
    await parts.send_all(link["buildId"], data, order)
    storage = ctx_of(app).storage
    assert isinstance(storage, LocalStorage)
    key = builds.key_of(link)

    await storage.complete_multipart(key, _upload_id(app, key), len(data), PART)

    info = await storage.stat(key)
    assert info is not None
    assert info.sha256 == hashlib.sha256(data).hexdigest()  # known without reading the file
    assert info.sha512 is None  # not a desktop application's build (tests/desktop)


async def test_a_part_sent_again_after_it_was_hashed_is_hashed_as_it_now_is(
    app: FastAPI, parts: Parts, builds: Builds
) -> None:
    data = file_of(20 * MiB + 1)
    link = await parts.link(data)
    await parts.send_all(link["buildId"], data, [1, 2, 3])
    assert (await parts.put(link["buildId"], 2, file_of(PART, seed=7))).status_code == 200

    r = await builds.verify(link["buildId"])

    changed = part_of(data, 1) + file_of(PART, seed=7) + part_of(data, 3)
    assert r.status_code == 202, r.text
    jobs = ctx_of(app).jobs
    assert jobs is not None
    await jobs.run_until_idle()
    assert (await builds.get(link["buildId"])).json()["sha256"] == (
        hashlib.sha256(changed).hexdigest()
    )


def _upload_id(app: FastAPI, key: str) -> str:
    storage = ctx_of(app).storage
    assert isinstance(storage, LocalStorage)
    meta = storage.root / "multipart" / key / "meta.json"
    upload_id: str = json.loads(meta.read_text())["uploadId"]
    return upload_id


async def test_a_build_whose_background_check_never_finished_is_swept_after_its_link(
    app: FastAPI, parts: Parts, builds: Builds, clock: FrozenClock
) -> None:
    data = file_of(20 * MiB)
    link = await parts.link(data)
    await parts.send_all(link["buildId"], data, [1, 2, 3])
    assert (await builds.verify(link["buildId"])).status_code == 202  # its job never runs
    ctx = ctx_of(app)

    clock.advance(seconds=ctx.settings.multipart_upload_ttl_seconds)
    swept_early = await sweep(
        ctx.sessions, ctx.storage, clock.now(), ctx.settings.resolved_public_url
    )
    clock.advance(seconds=GRACE.total_seconds() + 1)
    swept = await sweep(ctx.sessions, ctx.storage, clock.now(), ctx.settings.resolved_public_url)

    assert (swept_early.expired_uploads, swept.expired_uploads) == (0, 1)
    storage = ctx.storage
    assert isinstance(storage, LocalStorage)
    assert not storage.path_of(builds.key_of(link)).exists()  # its joined bytes went too


async def test_two_verifies_at_once_both_answer_the_ready_build(
    parts: Parts, builds: Builds
) -> None:
    data = file_of(12 * MiB)
    link = await parts.link(data, sha256=hashlib.sha256(data).hexdigest())
    await parts.send_all(link["buildId"], data, [1, 2])

    answers = await asyncio.gather(builds.verify(link["buildId"]), builds.verify(link["buildId"]))

    assert [a.status_code for a in answers] == [200, 200], [a.text for a in answers]
    assert {a.json()["sha256"] for a in answers} == {hashlib.sha256(data).hexdigest()}

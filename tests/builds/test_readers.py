"""Reading a build file's metadata is linear in the file, bounded in every count it reads, and done
in a process that is stopped at its limits of processor time, memory and wall-clock time: one
tenant's hostile file cannot hold a reading process, nor the server, beyond them.

The hostile readers (tests/builds/hostile_readers.py) stand for a parser bug that a file could
reach: each reading process imports them by name, as it imports `read_metadata`."""

from __future__ import annotations

import asyncio
import hashlib
import io
import os
import plistlib
import zipfile
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from pathlib import Path
from typing import IO, Any

import pytest
from fastapi import FastAPI

from buildbay.builds.android import SIGNATURES_LIMIT, parse_apk
from buildbay.builds.archive import ENTRIES_LIMIT, MetadataError, open_archive
from buildbay.builds.ipa import ICON_NAMES_LIMIT, ICON_TRIES_LIMIT, parse_ipa
from buildbay.builds.metadata import Reading
from buildbay.builds.readers import MetadataReaders, ReadLimits
from buildbay.storage.base import StorageUnavailable
from tests.builds.android_files import APK_V1, expected
from tests.builds.conftest import Builds
from tests.builds.hostile_readers import (
    balloon,
    crash,
    hang,
    hang_on_slow,
    read_size,
    spin,
    wait_for_go,
)
from tests.builds.test_metadata import INFO, cgbi_png, ipa
from tests.conftest import assert_problem
from tests.pools import Checkouts

MiB = 1024 * 1024


def crafted_ipa(names: int = 40_000, pngs: int = 3_200) -> bytes:
    """The attack's .ipa: an Info.plist naming `names` icon files, none of which is among the
    `pngs` PNG files beside it (every name is compared with every file: the worst case)."""
    info = {**INFO, "CFBundleIconFiles": [f"I{i}" for i in range(names)]}
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("Payload/X.app/Info.plist", plistlib.dumps(info, fmt=plistlib.FMT_BINARY))
        for i in range(pngs):
            archive.writestr(f"Payload/X.app/P{i}.png", b"\x89PNG")
    return out.getvalue()


def opener(data: bytes) -> Callable[[], IO[bytes]]:
    return lambda: io.BytesIO(data)


LIMITS = ReadLimits(cpu_seconds=1, memory_bytes=1024 * MiB, timeout_seconds=60)
QUICK = ReadLimits(cpu_seconds=0.2, memory_bytes=1024 * MiB, timeout_seconds=60)


@pytest.fixture
async def readers() -> AsyncIterator[Callable[..., MetadataReaders]]:
    made: list[MetadataReaders] = []

    def make(read: Any = None, limits: ReadLimits = LIMITS, **options: Any) -> MetadataReaders:
        pool = MetadataReaders(1, limits, **options, **({"read": read} if read else {}))
        made.append(pool)
        return pool

    yield make
    for pool in made:
        await pool.aclose()


# -- linear and bounded ---------------------------------------------------------------------------


async def test_the_crafted_ipa_is_read_within_one_second_of_processor_time(
    readers: Callable[..., MetadataReaders],
) -> None:
    """The attack's file took 14 s (40,000 names times 3,200 files): now its reading process,
    limited to 1 s of processor time, reads it."""
    data = crafted_ipa()
    assert len(data) < 700_000  # the attack's was 430 KB: the same counts, shorter names

    reading = await readers().read(opener(data), "X.ipa")

    assert reading.error is None, reading.error
    assert reading.metadata is not None
    assert reading.metadata["bundleId"] == "com.example.app"
    assert reading.icon_png is None


def test_icon_names_past_the_bound_are_not_considered() -> None:
    icon, _ = cgbi_png(8, 8)
    names = [f"Other{i}" for i in range(ICON_NAMES_LIMIT)]

    within = parse_ipa(
        ipa({**INFO, "CFBundleIconFiles": ["AppIcon", *names[1:]]}, extra={"AppIcon.png": icon})
    )
    beyond = parse_ipa(
        ipa({**INFO, "CFBundleIconFiles": [*names, "AppIcon"]}, extra={"AppIcon.png": icon})
    )

    assert within.icon_png is not None
    assert beyond.icon_png is None  # the 101st name: never compared with a file


def test_at_most_a_few_icon_files_are_decoded() -> None:
    """Files that claim to be the icon but are not PNGs: the largest few are tried, then none."""
    icon, _ = cgbi_png(8, 8)
    broken = {f"AppIcon{i}@3x.png": b"not a png" * 100 for i in range(ICON_TRIES_LIMIT)}
    info = {**INFO, "CFBundleIconFiles": ["AppIcon"]}

    assert parse_ipa(
        ipa(info, extra={**dict(list(broken.items())[:-1]), "AppIcon.png": icon})
    ).icon_png
    assert parse_ipa(ipa(info, extra={**broken, "AppIcon.png": icon})).icon_png is None


def test_at_most_a_few_old_style_signatures_are_tried() -> None:
    original = zipfile.ZipFile(io.BytesIO(APK_V1.read_bytes()))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        for i in range(SIGNATURES_LIMIT):  # before the real one in the directory
            archive.writestr(f"META-INF/A{i}.RSA", b"not a signature")
        for entry in original.infolist():
            archive.writestr(entry, original.read(entry))

    original_certificate = parse_apk(io.BytesIO(APK_V1.read_bytes())).metadata
    assert original_certificate["signingCertificateSha256"] == expected()["certificateV1"]
    assert parse_apk(out).metadata["signingCertificateSha256"] is None


def test_a_directory_that_declares_too_many_entries_is_refused_before_it_is_read() -> None:
    """A zip64 end record declaring more entries than the bound: refused from the end record,
    before zipfile reads the directory and makes an object per entry."""
    small = io.BytesIO()
    with zipfile.ZipFile(small, "w") as archive:
        archive.writestr("Payload/X.app/Info.plist", plistlib.dumps(INFO))
    data = small.getvalue()
    end = data.rindex(b"PK\x05\x06")
    directory_size = int.from_bytes(data[end + 12 : end + 16], "little")
    directory_at = int.from_bytes(data[end + 16 : end + 20], "little")
    zip64_end = (
        b"PK\x06\x06"
        + (44).to_bytes(8, "little")
        + (45).to_bytes(2, "little") * 2
        + bytes(8)
        + (ENTRIES_LIMIT + 1).to_bytes(8, "little") * 2
        + directory_size.to_bytes(8, "little")
        + directory_at.to_bytes(8, "little")
    )
    locator = b"PK\x06\x07" + bytes(4) + end.to_bytes(8, "little") + (1).to_bytes(4, "little")
    record = bytearray(data[end:])
    record[8:12] = b"\xff\xff\xff\xff"  # entries: see the zip64 record
    hostile = data[:end] + zip64_end + locator + bytes(record)

    with pytest.raises(MetadataError, match=f"more than {ENTRIES_LIMIT} entries"):
        open_archive(io.BytesIO(hostile))


# -- the reading process's limits ---------------------------------------------------------------


async def test_a_reader_that_spins_is_stopped_at_its_processor_limit_and_replaced(
    readers: Callable[..., MetadataReaders],
) -> None:
    pool = readers(spin, QUICK)

    reading = await pool.read(opener(b"x"), "app.ipa")

    stopped = Reading(
        error="Not a readable .ipa: reading it took more than 0.2 seconds of processor time"
    )
    assert reading == stopped
    assert pool.started == 1
    assert await pool.read(opener(b"x"), "app.ipa") == stopped  # a new process, stopped too
    assert pool.started == 2


async def test_a_reader_that_balloons_is_stopped_at_its_memory_limit(
    readers: Callable[..., MetadataReaders],
) -> None:
    limits = ReadLimits(cpu_seconds=30, memory_bytes=512 * MiB, timeout_seconds=60)

    reading = await readers(balloon, limits).read(opener(b"x"), "app.apk")

    assert reading == Reading(
        error="Not a readable .apk: reading it needed more than 512 MiB of memory"
    )


async def test_a_reader_that_waits_forever_is_killed_at_the_wall_clock_limit(
    readers: Callable[..., MetadataReaders],
) -> None:
    limits = ReadLimits(cpu_seconds=30, memory_bytes=1024 * MiB, timeout_seconds=0.5)

    reading = await readers(hang, limits).read(opener(b"x"), "app.aab")

    assert reading == Reading(error="Not a readable .aab: reading it took longer than 0.5 seconds")


async def test_a_reader_that_crashes_is_an_unreadable_file_and_the_next_file_is_read(
    readers: Callable[..., MetadataReaders],
) -> None:
    crashing = readers(crash)
    assert await crashing.read(opener(b"x"), "app.ipa") == Reading(
        error="Not a readable .ipa: its reader stopped"
    )
    pool = readers()
    reading = await pool.read(opener(ipa().getvalue()), "Example.ipa")
    assert reading.metadata is not None
    assert reading.metadata["bundleId"] == "com.example.app"


async def test_a_process_reads_several_files_then_a_fresh_one_takes_over(
    readers: Callable[..., MetadataReaders],
) -> None:
    pool = readers(read_size, tasks_per_process=2)
    data = os.urandom(3 * MiB + 5)  # several chunks over the pipe

    pids = []
    for _ in range(3):
        reading = await pool.read(opener(data), "big.apk")
        assert reading.metadata is not None
        assert reading.metadata["read"] == len(data)
        pids.append(reading.metadata["pid"])

    assert pids[0] == pids[1] != pids[2]
    assert pool.started == 2


async def test_files_without_metadata_start_no_process(
    readers: Callable[..., MetadataReaders],
) -> None:
    pool = readers(spin)
    assert await pool.read(opener(b"7z\xbc\xaf"), "setup.7z") == Reading()
    assert pool.started == 0


# -- through verify ------------------------------------------------------------------------------


async def _ios(builds: Builds) -> None:
    r = await builds.client.put(
        f"/api/projects/{builds.project_id}/applications/{builds.app_id}",
        json={"platform": "ios"},
        headers=builds.owner.headers,
    )
    assert r.status_code == 200, r.text


async def test_verify_of_the_crafted_ipa_answers_its_metadata(app: FastAPI, builds: Builds) -> None:
    app.state.ctx.readers = MetadataReaders(1, LIMITS)
    data = crafted_ipa()
    link = await builds.link(data, fileName="X.ipa")
    await builds.put(link, data)

    r = await builds.verify(link["buildId"])

    await app.state.ctx.readers.aclose()
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "ready"
    assert r.json()["metadata"]["bundleId"] == "com.example.app"


async def test_verify_of_a_file_whose_reading_hits_a_limit_is_422_and_the_build_stays_pending(
    app: FastAPI, builds: Builds
) -> None:
    await _ios(builds)
    app.state.ctx.readers = MetadataReaders(1, QUICK, read=spin)
    data = ipa().getvalue()
    link = await builds.link(data, fileName="Example.ipa")
    await builds.put(link, data)

    r = await builds.verify(link["buildId"])

    problem = assert_problem(r, 422, "unreadable_build")
    assert problem["detail"] == (
        "Not a readable .ipa: reading it took more than 0.2 seconds of processor time; an iOS "
        "application takes only builds whose metadata can be read"
    )
    build = (await builds.get(link["buildId"])).json()
    assert build["status"] == "pending"
    assert build["failureCode"] == "unreadable_build"
    assert build["metadataError"] == problem["detail"]

    await app.state.ctx.readers.aclose()
    app.state.ctx.readers = MetadataReaders(1, LIMITS)  # the same file, read as it should be
    r = await builds.verify(link["buildId"])
    await app.state.ctx.readers.aclose()
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "ready"


async def test_an_accounts_verifies_waiting_for_reads_hold_no_connection_nor_every_process(
    app: FastAPI, builds: Builds, tmp_path: Path
) -> None:
    """An account verifies four builds at once, from two projects, whose reading takes until the
    test says go. Meanwhile none of them holds a database connection (they held one each: on
    PostgreSQL, a pool of ten held by ten such verifies stalled every other request), and
    another account's verify finds a reading process: an account reads in all processes but
    one, whatever the project (a project's share alone let two projects take both)."""
    ctx = app.state.ctx
    pool = ctx.readers = MetadataReaders(2, LIMITS, read=wait_for_go)
    go = tmp_path / "go"
    second = await builds.api.project(builds.owner, "Second")
    apps = [
        builds,
        replace(
            builds,
            project_id=second["id"],
            app_id=(await builds.api.application(builds.owner, second["id"]))["id"],
        ),
    ]
    links = []
    for i, where in enumerate(apps * 2):
        # Other bytes each (`/./` is the same path): the same bytes twice are one build.
        held = f"wait:{tmp_path}{'/.' * i}/go".encode()
        link = await where.link(held, fileName="hold.apk")
        await where.put(link, held)
        links.append((where, link))
    with Checkouts(ctx.engine, ctx.read_engine) as checkouts:
        waiting = [asyncio.create_task(where.verify(link["buildId"])) for where, link in links]
        try:
            projects = [f"project:{where.project_id}" for where in apps]
            for _ in range(3000):  # until all four are in: one read, three waiting
                if sum(map(pool.waiting, projects)) == 4:
                    break
                await asyncio.sleep(0.01)
            assert sum(map(pool.waiting, projects)) == 4

            assert [task for task in checkouts.held.values() if task in waiting] == []

            other = await builds.api.register()
            theirs = await builds.api.project(other, "Theirs")
            their_app = await builds.api.application(other, theirs["id"])
            them = replace(builds, owner=other, project_id=theirs["id"], app_id=their_app["id"])
            ready = await asyncio.wait_for(them.ready(APK_V1.read_bytes()), 30)
            assert ready["status"] == "ready"
            assert ready["metadata"]["packageName"] == expected()["packageName"]
            assert not any(task.done() for task in waiting)  # A's still wait
        finally:
            go.touch()
            answers = await asyncio.gather(*waiting)
            await pool.aclose()
    assert [r.status_code for r in answers] == [200] * 4, [r.text for r in answers]
    assert {r.json()["status"] for r in answers} == {"ready"}


async def test_a_put_landing_while_verify_reads_the_file_is_what_verify_checks(
    app: FastAPI, builds: Builds, tmp_path: Path
) -> None:
    """Verify holds no lock on the object while it reads the file (the lock's stripe is shared
    with other builds' uploads): a PUT lands meanwhile, and verify, seeing the bytes replaced,
    checks the new ones."""
    pool = app.state.ctx.readers = MetadataReaders(1, LIMITS, read=wait_for_go)
    first, second = f"wait:{tmp_path / 'go1'}".encode(), f"wait:{tmp_path / 'go2'}".encode()
    (tmp_path / "go2").touch()  # the second bytes read at once, the first when the test says
    link = await builds.pending(first, fileName="hold.apk")
    verify = asyncio.create_task(builds.verify(link["buildId"]))
    try:
        for _ in range(3000):  # until verify reads the first bytes
            if pool.waiting(f"project:{builds.project_id}"):
                break
            await asyncio.sleep(0.01)
        put = await asyncio.wait_for(builds.put(link, second), 10)
        assert put.status_code == 200, put.text
    finally:
        (tmp_path / "go1").touch()
        verified = await verify
        await pool.aclose()

    assert verified.status_code == 200, verified.text
    assert verified.json()["status"] == "ready"
    assert verified.json()["sha256"] == hashlib.sha256(second).hexdigest()


class _FailingStorageFile(io.BytesIO):
    """A stored file whose reads fail past its first bytes, as a bucket that stops answering."""

    def read(self, size: int | None = -1) -> bytes:
        if self.tell() > 0:
            raise OSError("the object store refused a read")
        return super().read(size)


async def test_a_storage_failure_under_a_read_is_503_not_an_unreadable_file(
    readers: Callable[..., MetadataReaders],
) -> None:
    pool = readers()
    data = ipa().getvalue()

    with pytest.raises(StorageUnavailable, match="try verify again"):
        await pool.read(lambda: _FailingStorageFile(data), "Example.ipa")

    reading = await pool.read(opener(data), "Example.ipa")  # a new process reads the next file
    assert reading.metadata is not None
    assert reading.metadata["bundleId"] == "com.example.app"


async def test_a_tenant_sending_many_files_leaves_a_process_for_the_others(
    readers: Callable[..., MetadataReaders],
) -> None:
    """Two processes; tenant A sends two files that never end. A reads one at a time, and B's
    file is read while A's second still waits (then both of A's stop at the wall clock)."""
    limits = ReadLimits(cpu_seconds=30, memory_bytes=1024 * MiB, timeout_seconds=8)
    pool = MetadataReaders(2, limits, read=hang_on_slow)
    data = ipa().getvalue()
    try:
        first = asyncio.create_task(pool.read(opener(b"x"), "slow.ipa", ("prj_a",)))
        second = asyncio.create_task(pool.read(opener(b"x"), "slow.ipa", ("prj_a",)))
        other = asyncio.create_task(pool.read(opener(data), "Example.ipa", ("prj_b",)))

        done, _ = await asyncio.wait({first, second, other}, return_when=asyncio.FIRST_COMPLETED)

        assert done == {other}
        reading = other.result()
        assert reading.metadata is not None
        assert reading.metadata["bundleId"] == "com.example.app"
        stopped = Reading(error="Not a readable .ipa: reading it took longer than 8 seconds")
        assert await first == stopped
        assert await second == stopped
    finally:
        await pool.aclose()


class _LargeBuild(io.RawIOBase):
    """A 3 GiB build made up on the fly: zeros, then an .ipa (zipfile finds an archive after a
    prefix, as in a self-extracting one). Counts the bytes the reading process asked for."""

    PREFIX = 3 * 1024 * MiB

    def __init__(self, archive: bytes) -> None:
        super().__init__()
        self.archive, self.position, self.served = archive, 0, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        size = self.PREFIX + len(self.archive)
        self.position = {io.SEEK_SET: 0, io.SEEK_CUR: self.position, io.SEEK_END: size}[whence]
        self.position += offset
        return self.position

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        end = min(self.position + len(view), self.PREFIX + len(self.archive))
        data = bytes(max(0, min(end, self.PREFIX) - self.position))
        data += self.archive[max(0, self.position - self.PREFIX) : max(0, end - self.PREFIX)]
        view[: len(data)] = data
        self.position += len(data)
        self.served += len(data)
        return len(data)


async def test_a_multi_gib_build_is_read_without_its_bytes_reaching_the_process(
    readers: Callable[..., MetadataReaders],
) -> None:
    """The reading process asks for the directory and the entries it reads, never the file."""
    build = _LargeBuild(ipa().getvalue())
    limits = ReadLimits(cpu_seconds=10, memory_bytes=512 * MiB, timeout_seconds=60)

    reading = await readers(limits=limits).read(lambda: build, "Large.ipa")

    assert reading.metadata is not None, reading.error
    assert reading.metadata["bundleId"] == "com.example.app"
    assert build.served < 1 * MiB  # of 3 GiB, with a process limited to 512 MiB

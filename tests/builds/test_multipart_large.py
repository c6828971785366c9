"""A 10 GiB build in parts from a sparse file: every part through the local storage address,
verify in the background, the right sha256 at the end, and memory that stays flat (speed is
not the point here). Slow: it writes 10 GiB to disk."""

from __future__ import annotations

import resource
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI

from buildbay.config import Settings
from buildbay.context import AppContext
from buildbay.storage.local import LocalStorage
from tests.builds.conftest import Builds
from tests.conftest import PG_URL

MiB = 1024 * 1024
SIZE = 10 * 1024**3
BLOCK = MiB

# With the SQLite suite only: 10 GiB prove the storage's parts and memory, and the database
# adds a few rows to that; on PostgreSQL it would only take CI minutes more.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(bool(PG_URL), reason="10 GiB of parts run with the SQLite suite"),
]


# The 10 GiB go to memory (tmpfs) where it has room: written to the disk, their writeback held
# up every other test's fsync for the two minutes the test took. What it proves (the parts, the
# sha256, flat memory) is the same on either.
SHM = Path("/dev/shm")


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    if SHM.is_dir() and shutil.disk_usage(SHM).free > SIZE + 2 * 1024**3:
        with tempfile.TemporaryDirectory(dir=SHM, prefix="buildbay-10gib-") as directory:
            yield Path(directory) / "data"
    else:
        yield tmp_path / "data"


@pytest.fixture
def settings(settings: Settings, data_dir: Path) -> Settings:
    return settings.model_copy(
        update={
            "data_dir": data_dir,
            "max_upload_bytes_free": SIZE,
            "quota_bytes_free": 0,
            # Hashing 10 GiB from disk may take a minute on a busy machine: a handler gets half.
            "job_lease_seconds": 1200,
        }
    )


def peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


# The sha256 of SIZE zero bytes, as `head -c 10737418240 /dev/zero | sha256sum` prints it:
# hashing them again here cost this test half its CPU (the server hashes them once already).
ZEROS_SHA256 = "732377e7f4a2abdc13ddfa1eb4c9c497fd2a2b294674d056cf51581b47dd586d"


async def read_range(path: Path, offset: int, length: int) -> AsyncIterator[bytes]:
    with path.open("rb") as f:
        f.seek(offset)
        left = length
        while left:
            chunk = f.read(min(BLOCK, left))
            left -= len(chunk)
            yield chunk


async def test_a_10_gib_build_from_a_sparse_file_verifies_with_flat_memory(
    app: FastAPI, builds: Builds, data_dir: Path
) -> None:
    source = data_dir.parent / "big.bin"
    with source.open("wb") as f:
        f.truncate(SIZE)  # sparse: no block on disk
    ctx: AppContext = app.state.ctx
    storage = ctx.storage
    assert isinstance(storage, LocalStorage)
    try:
        r = await builds.request_link({"fileName": "big.bin", "fileSize": SIZE, "multipart": True})
        assert r.status_code == 201, r.text
        build_id, plan = r.json()["buildId"], r.json()["multipart"]
        part_size, count = plan["partSize"], plan["partsCount"]
        assert part_size * count >= SIZE
        before = peak_rss()

        for first in range(1, count + 1, 100):
            numbers = list(range(first, min(first + 100, count + 1)))
            r = await builds.client.post(
                f"{builds.base}/{build_id}/parts",
                json={"partNumbers": numbers},
                headers=builds.owner.headers,
            )
            assert r.status_code == 200, r.text
            for target in r.json()["parts"]:
                offset = (target["partNumber"] - 1) * part_size
                length = min(part_size, SIZE - offset)
                put = await builds.uploader.put(
                    target["url"],
                    content=read_range(source, offset, length),
                    headers={**target["headers"], "Content-Length": str(length)},
                )
                assert put.status_code == 200, put.text

        r = await builds.verify(build_id)
        assert r.status_code == 202, r.text
        jobs = ctx.jobs
        assert jobs is not None
        await jobs.run_until_idle()
        build = (await builds.get(build_id)).json()

        assert build["status"] == "ready", build
        assert build["fileSize"] == SIZE
        assert build["sha256"] == ZEROS_SHA256
        assert peak_rss() - before < 64 * MiB
    finally:
        source.unlink()
        shutil.rmtree(storage.root, ignore_errors=True)  # the 10 GiB the parts wrote

"""Screenshots are re-encoded in worker processes (feedback/images.py), not in the server's: a
worker that dies (the kernel's out-of-memory killer, a codec's crash) is replaced, and the next
feedback is stored as if nothing had happened."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from buildbay.feedback.images import SCREENSHOT_PREFIX, reencode_all, spool_file, worker_pids
from buildbay.storage.disk import remove_unlocked_files
from tests.conftest import Account, Api
from tests.feedback.submitting import World, jpeg_with_gps, make_world, opened, png, screenshots

pytestmark = pytest.mark.usefixtures("no_leaks")


@pytest.fixture
async def world(api: Api, client: httpx.AsyncClient, app: FastAPI, owner: Account) -> World:
    return await make_world(api, client, app, owner)


async def test_a_killed_worker_is_replaced_and_the_next_feedback_is_stored(world: World) -> None:
    first = await world.send(world.tester, files=screenshots(png((30, 20))))
    assert first.status_code == 201, first.text
    workers = worker_pids()
    assert workers
    assert os.getpid() not in workers  # decoded out of the server's process

    for pid in workers:  # as the out-of-memory killer ends a process
        os.kill(pid, signal.SIGKILL)

    shots = [*screenshots(png((40, 30))), *screenshots(jpeg_with_gps(), kind="image/jpeg")]
    r = await world.send(world.tester, files=shots)
    assert r.status_code == 201, r.text
    stored = r.json()["screenshots"]
    assert [(s["width"], s["height"]) for s in stored] == [(40, 30), (64, 32)]
    served = await world.client.get(stored[1]["url"])
    assert served.status_code == 200
    assert opened(served.content).getexif().get_ifd(0x8825) == {}
    replaced = worker_pids()
    assert replaced
    assert not set(replaced) & set(workers)


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="SCHED_IDLE is Linux's")
async def test_the_workers_run_only_on_cores_nothing_else_wants(world: World) -> None:
    # SCHED_IDLE, and nice +10 beside it (their disk I/O's priority follows it): at nice +10
    # alone a worker took a share of the core the server's event loop wanted.
    r = await world.send(world.tester, files=screenshots(png((30, 20))))
    assert r.status_code == 201, r.text

    workers = worker_pids()
    assert workers
    for pid in workers:
        assert os.sched_getscheduler(pid) == os.SCHED_IDLE
        assert os.getpriority(os.PRIO_PROCESS, pid) >= 10
    assert os.sched_getscheduler(0) == os.SCHED_OTHER  # the server's own process is not


async def test_a_screenshot_s_files_are_swept_only_once_no_feedback_holds_them(
    tmp_path: Path,
) -> None:
    """A screenshot as it arrived and as the worker re-encoded it are files by name
    (feedback/images.py), which a crash of the server would leave behind. Catches: the sweeper
    removing a file a feedback still holds (its stored screenshot would be cut short), a
    crash's file kept for good, and a feedback's file left when it is done with it."""
    spool = tmp_path / "spool"
    spool.mkdir()
    arrived = spool_file(spool)
    arrived.write(png((30, 20)))
    arrived.flush()
    (shot,) = await reencode_all([arrived.name], spool)
    held = _names(spool)
    assert len(held) == 2
    assert all(name.startswith(SCREENSHOT_PREFIX) for name in held)
    _write(spool / f"{SCREENSHOT_PREFIX}of-a-crash", b"half a png")

    assert remove_unlocked_files(spool, time.time() - 3600) == 0  # all too new
    assert remove_unlocked_files(spool, time.time() + 3600) == 1
    assert _names(spool) == held
    assert opened(shot.file.read()).size == (30, 20)  # whole

    shot.close()
    arrived.close()
    assert _names(spool) == []


def _names(directory: Path) -> list[str]:
    return sorted(path.name for path in directory.iterdir())


def _write(path: Path, data: bytes) -> None:
    path.write_bytes(data)

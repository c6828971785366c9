"""`kill -9` of the server in the middle of an upload's steps, then a restart on the same port and
data: nothing is half-done, the client's retry of the same step succeeds, and after the sweeper
no byte is left that no build owns."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from buildbay.storage.local import LocalStorage
from buildbay.storage.signing import UrlSigner
from tests.faults.conftest import (
    Server,
    assert_problem_response,
    assert_store_matches_builds,
    files_under,
    sweep_later,
    wait_for,
)
from tests.processes import Uploader

pytestmark = [pytest.mark.slow, pytest.mark.faults]

MiB = 1024 * 1024


class BuildFile:
    """`size_mib` MiB that differ in every MiB, made on the fly (not held in memory)."""

    def __init__(self, size_mib: int) -> None:
        self.size_mib = size_mib
        self._block = os.urandom(MiB)
        digest = hashlib.sha256()
        for chunk in self.chunks():
            digest.update(chunk)
        self.sha256 = digest.hexdigest()

    @property
    def size(self) -> int:
        return self.size_mib * MiB

    def chunks(
        self, pause_after: int | None = None, resume: threading.Event | None = None
    ) -> Iterator[bytes]:
        for i in range(self.size_mib):
            if i == pause_after:
                assert resume is not None
                resume.wait(120)
            yield i.to_bytes(4, "big") + self._block[4:]


def _put(link: dict[str, Any], body: Any, size: int) -> httpx.Response:
    headers = {**link["uploadHeaders"], "Content-Length": str(size)}
    return httpx.put(link["uploadUrl"], content=body, headers=headers, timeout=120)


def _put_in_background(
    link: dict[str, Any], file: BuildFile, pause_after: int, resume: threading.Event
) -> threading.Thread:
    """A PUT that sends `pause_after` MiB, then waits for `resume`; the kill ends it."""

    def run() -> None:
        with contextlib.suppress(httpx.TransportError):  # the server dies under it
            _put(link, file.chunks(pause_after, resume), file.size)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _partial_uploads(server: Server) -> list[int]:
    """Sizes of the files uploads are streaming into."""
    sizes = []
    for path in files_under(server.data_dir / "builds" / "incoming"):
        if not path.name.startswith("upload-"):
            continue  # e.g. /readyz's probe of the store
        try:
            sizes.append(path.stat().st_size)
        except FileNotFoundError:
            continue
    return sizes


def _reading_position(pid: int, path: Path) -> int | None:
    """How far process `pid` has read into `path`, if it has it open."""
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            if fd.readlink() != path:
                continue
            for line in Path(f"/proc/{pid}/fdinfo/{fd.name}").read_text().splitlines():
                if line.startswith("pos:"):
                    return int(line.split()[1])
        except (FileNotFoundError, ProcessLookupError):
            continue
    return None


def test_an_upload_killed_in_its_put_and_in_its_verify_ends_ready_with_nothing_left_over(
    server_env: dict[str, str], servers: Callable[..., Server]
) -> None:
    """One upload of 256 MiB meets two SIGKILLs of the server, each followed by a restart on
    the same port and data, and each time the client retries the same step.

    1. In the PUT, once 8 MiB are on the server's disk (a second upload, whose client then
       gives up, is cut off with it). Catches: a partial file published as the object (verify
       would see bytes); a build made ready or lost by the crash; an upload URL that no longer
       works after a restart.
    2. In the verify, while it hashes the bytes: the moment is found in /proc (the server has
       the object open and has read part of it), not guessed. Verify reads every byte when
       the hash kept beside the object is missing, as a crash between the object's rename and
       its hash's leaves it. Catches: a build made ready before its bytes were checked; a lock
       or half-written row left by the crash that blocks the retry; a wrong sha256.

    Then the sweeper runs as if hours had passed. Catches: the partial files of the killed
    PUTs staying in incoming/ forever (nothing removed them before this test); the abandoned
    build or its bytes surviving; the ready build losing its bytes.
    """
    server = servers(server_env).start()
    file = BuildFile(256)
    with httpx.Client(base_url=server.base, timeout=120) as http:
        user = Uploader.sign_up(http)
        link = user.link(file.size, sha256=file.sha256)
        abandoned = user.link(file.size)

        # 1. Killed in the middle of the PUT.
        resume = threading.Event()
        puts = [_put_in_background(each, file, 12, resume) for each in (link, abandoned)]
        wait_for(
            lambda: sum(size >= 8 * MiB for size in _partial_uploads(server)) == 2,
            "both uploads to have 8 MiB on the server's disk",
            interval=0.005,
        )
        server.kill()
        resume.set()
        for put in puts:
            put.join(timeout=60)
        assert len(_partial_uploads(server)) == 2  # what the crash left behind

        server.start()
        assert user.build(link["buildId"])["status"] == "pending"
        r = user.verify(link["buildId"])
        assert_problem_response(r, 422, "upload_incomplete")  # no partial object was published
        r = _put(link, file.chunks(), file.size)  # the same URL, as a client's retry sends it
        assert r.status_code == 200, r.text
        assert r.json() == {"buildId": link["buildId"], "size": file.size, "sha256": file.sha256}

        # 2. Killed in the middle of the verify.
        stored = server.data_dir / "builds" / "objects" / user.project_id / user.app_id
        stored = (stored / link["buildId"]).resolve()  # as /proc names it
        stored.with_name(stored.name + ".sha256").unlink()
        answers: list[httpx.Response] = []
        verifying = threading.Thread(target=_verify, args=(user, link, answers), daemon=True)
        verifying.start()

        def hashing() -> int | None:
            at = _reading_position(server.pid, stored)
            if at is not None and 0 < at < file.size:
                return at
            assert verifying.is_alive(), f"verify ended before it was caught: {answers}"
            return None

        wait_for(hashing, "the server to be part-way through hashing the upload", interval=0)
        server.kill()
        verifying.join(timeout=60)
        assert answers == []  # the kill came before any answer

        server.start()
        assert user.build(link["buildId"])["status"] == "pending"
        r = user.verify(link["buildId"])  # the same step again
        assert r.status_code == 200, r.text
        assert r.json()["status"] == "ready"
        assert r.json()["sha256"] == file.sha256

        # 3. The sweeper, hours later: only the ready build and its bytes remain.
        swept = sweep_later(server.env)
        assert (swept.expired_uploads, swept.abandoned_uploads) == (1, 2)
        builds = user.builds()
        assert [b["buildId"] for b in builds] == [link["buildId"]]
        assert_store_matches_builds(server.data_dir, builds)


def _verify(user: Uploader, link: dict[str, Any], answers: list[httpx.Response]) -> None:
    with httpx.Client(base_url=user.http.base_url, timeout=120) as http:
        body = {"buildId": link["buildId"]}
        with contextlib.suppress(httpx.TransportError):  # killed while verifying
            answers.append(http.post(f"{user.base}/verify", json=body, headers=user.headers))


async def test_the_sweeper_removes_a_dead_uploads_partial_file_and_never_a_live_ones(
    tmp_path: Path,
) -> None:
    """What a killed upload leaves in incoming/ is unlocked; a live upload, however slow (its
    file untouched for longer than the sweeper's margin), holds an flock on its own. Catches:
    the sweeper deleting a file an upload is still streaming into (that upload would then
    fail at its end), or keeping a dead one."""
    storage = LocalStorage(tmp_path / "builds", "http://127.0.0.1", UrlSigner(b"k" * 32))
    incoming = tmp_path / "builds" / "incoming"
    started, resume = asyncio.Event(), asyncio.Event()

    async def slow_body() -> AsyncIterator[bytes]:
        yield b"x" * 100
        started.set()  # its file was made and locked before the first chunk was asked for
        await resume.wait()
        yield b"y" * 100

    live = asyncio.create_task(storage.receive("p/a/live", 200, slow_body()))
    await asyncio.wait_for(started.wait(), 30)
    (streaming,) = files_under(incoming)
    dead = incoming / "upload-killed"  # a killed process's partial file, and its hash's
    dead.write_bytes(b"partial")
    dead.with_name("upload-killed.sha256").write_text("half")

    now = datetime.now(UTC)
    assert await storage.remove_abandoned_uploads(now - timedelta(minutes=1)) == 0  # too new
    assert await storage.remove_abandoned_uploads(now + timedelta(days=1)) == 2
    assert files_under(incoming) == [streaming]

    resume.set()
    info = await live
    assert (info.size, info.sha256) == (200, hashlib.sha256(b"x" * 100 + b"y" * 100).hexdigest())
    assert files_under(incoming) == []

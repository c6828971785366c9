"""The build store's disk fills up: a small tmpfs mounted as the data directory's `builds/`."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tests.faults.conftest import (
    IS_ROOT,
    Server,
    assert_problem_response,
    assert_store_matches_builds,
    files_under,
)
from tests.processes import Uploader

pytestmark = [pytest.mark.slow, pytest.mark.faults]

MiB = 1024 * 1024


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """An 8 MiB tmpfs at `<data dir>/builds`, unmounted at the end."""
    if not IS_ROOT:
        pytest.skip("mounting a small tmpfs needs root")
    builds = tmp_path / "data" / "builds"
    builds.mkdir(parents=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=8m,mode=0700", "tmpfs", str(builds)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield builds
    finally:
        # The server is stopped by then (`servers` is set up after this fixture); lazily, in
        # case a process still has a file open there.
        subprocess.run(["umount", "-l", str(builds)], check=True)


def _free(path: Path) -> int:
    stat = os.statvfs(path)
    return stat.f_bavail * stat.f_frsize


def _fill(disk: Path, leave: int) -> Path:
    """A ballast file that leaves exactly `leave` bytes free (tmpfs counts whole pages)."""
    ballast = disk / "ballast"
    with ballast.open("ab") as file:
        file.write(b"\0" * (_free(disk) - leave))
    assert _free(disk) == leave
    return ballast


def _put(link: dict[str, object], data: bytes) -> httpx.Response:
    return httpx.put(str(link["uploadUrl"]), content=data, timeout=60)


def test_a_full_disk_refuses_the_put_with_507_keeps_nothing_and_the_retry_succeeds_once_freed(
    small_disk: Path, server_env: dict[str, str], servers: Callable[..., Server]
) -> None:
    """Catches: ENOSPC escaping as a 500 or a dropped connection; a partial temporary file or
    object left on the full disk; an upload whose bytes all fit but whose hash did not being
    answered 507 while its object stayed in place (and a stray hash file beside it); a server
    that stops serving once its disk is full; an upload URL that cannot be retried."""
    server = servers(server_env).start()
    data = os.urandom(2 * MiB)
    with httpx.Client(base_url=server.base, timeout=60) as http:
        user = Uploader.sign_up(http)
        link = user.link(len(data))

        # Less free space than the upload: the disk fills while the bytes stream in.
        ballast = _fill(small_disk, leave=MiB)
        r = _put(link, data)
        body = assert_problem_response(r, 507, "storage_full")
        assert "full" in body["detail"]
        assert files_under(small_disk / "incoming") == []
        assert files_under(small_disk / "objects") == []

        # Room for every byte but not for the hash kept beside them.
        ballast.unlink()
        _fill(small_disk, leave=len(data))
        r = _put(link, data)
        assert_problem_response(r, 507, "storage_full")
        assert files_under(small_disk / "incoming") == []
        assert files_under(small_disk / "objects") == []
        assert_problem_response(user.verify(link["buildId"]), 422, "upload_incomplete")

        # The server kept serving throughout, and says it is ready: reads need no disk space.
        assert http.get("/api/projects", headers=user.headers).status_code == 200
        assert http.get("/readyz").status_code == 200

        ballast.unlink()
        r = _put(link, data)  # the client's retry of the same URL
        assert r.status_code == 200, r.text
        r = user.verify(link["buildId"])
        assert r.status_code == 200, r.text
        assert r.json()["status"] == "ready"
        assert user.download(link["buildId"]) == data
        assert_store_matches_builds(server.data_dir, user.builds())

"""Real processes for the tests: a free port, and a process that is stopped whatever happens."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def running(
    argv: Sequence[str],
    *,
    env: dict[str, str],
    log_path: Path,
    ready_url: str,
    timeout: float = 30.0,
) -> Iterator[subprocess.Popen[bytes]]:
    """Start `argv`, wait until `ready_url` answers 200, and stop it (SIGTERM, then SIGKILL)."""
    with log_path.open("wb") as log:
        process = subprocess.Popen(list(argv), env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if httpx.get(ready_url, timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert process.poll() is None, f"{argv[0]} exited:\n{log_path.read_text()}"
            assert time.monotonic() < deadline, f"no answer at {ready_url}:\n{log_path.read_text()}"
            time.sleep(0.1)
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

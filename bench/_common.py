"""Shared by the benchmarks: a real server subprocess, a free port, a registered user."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import httpx
import redis

ROOT = Path(__file__).resolve().parent.parent
VENV_BIN = ROOT / ".venv" / "bin"
PASSWORD = "bench-password-123"
RSS_SAMPLE_SECONDS = 0.02


def cpu_seconds(pid: int, thread: int | None = None) -> float:
    """User + system CPU time so far of a process (all its threads), or of its thread `thread`,
    from /proc."""
    path = f"/proc/{pid}/stat" if thread is None else f"/proc/{pid}/task/{thread}/stat"
    fields = Path(path).read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def vm_rss_kib(pid: int) -> int:
    """A process's resident memory now, from /proc."""
    with open(f"/proc/{pid}/status") as f:  # noqa: PTH123 - read a few times a second
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


def descendants(pid: int) -> list[int]:
    """The processes started by `pid`, and by them in turn (a fork server's children), from
    /proc."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            for child in (task / "children").read_text().split():
                found += [int(child), *descendants(int(child))]
    return found


def tree_cpu_seconds(pid: int) -> float:
    """`cpu_seconds` of `pid` and of every process it started that is still running."""
    total = cpu_seconds(pid)
    for child in descendants(pid):
        with contextlib.suppress(OSError):
            total += cpu_seconds(child)
    return total


def pss_kib(pid: int) -> int:
    """A process's proportional share of resident memory (its own pages, and its share of the
    pages it shares with others, such as a fork server's children), from /proc."""
    with open(f"/proc/{pid}/smaps_rollup") as f:  # noqa: PTH123 - read a few times a second
        for line in f:
            if line.startswith("Pss:"):
                return int(line.split()[1])
    raise RuntimeError(f"no Pss for pid {pid}")


def tree_pss_kib(pid: int) -> int:
    """The memory of `pid` and of every process it started (a server's with its worker
    processes), each page counted once: the sum of their `pss_kib`."""
    total = pss_kib(pid)
    for child in descendants(pid):
        with contextlib.suppress(OSError, RuntimeError):
            total += pss_kib(child)
    return total


class RssSampler(threading.Thread):
    """The peak VmRSS of a process (with `tree`, the peak memory of it and its descendants:
    `tree_pss_kib`), sampled every RSS_SAMPLE_SECONDS from `start` to `stop`."""

    def __init__(self, pid: int, *, tree: bool = False) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self._rss = tree_pss_kib if tree else vm_rss_kib
        self.peak_kib = self._rss(pid)
        self.samples = 0
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.wait(RSS_SAMPLE_SECONDS):
            self.peak_kib = max(self.peak_kib, self._rss(self.pid))
            self.samples += 1

    def stop(self) -> None:
        self._stop_event.set()
        self.join()
        self.peak_kib = max(self.peak_kib, self._rss(self.pid))


def mails_written(data_dir: Path) -> int:
    """The mails a server with no SMTP server configured has written: `.eml` files under its
    data directory."""
    mails = data_dir / "mail"
    return sum(1 for _ in mails.glob("*.eml")) if mails.is_dir() else 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    process: subprocess.Popen[bytes]
    base_url: str
    log_path: Path

    @property
    def pid(self) -> int:
        return self.process.pid


# The benches add the same new accounts as members again and again (webhooks.py's member
# changes) and thousands at once (mail.py): the daily invitation caps (docs/operations.md),
# which tests/invitations proves, would refuse them. Off in every bench server.
# A server for the upload benches: builds up to 8 GiB, no storage quota, no rate limit.
LARGE_UPLOADS = {
    "BUILDBAY_RATE_LIMIT_ENABLED": "false",
    "BUILDBAY_MAX_UPLOAD_BYTES_FREE": str(8 * 1024**3),
    "BUILDBAY_QUOTA_BYTES_FREE": "0",
}
NO_INVITATION_CAPS = {
    f"BUILDBAY_INVITATIONS_PER_{kind}": "0"
    for kind in (
        "RECIPIENT_PER_DAY",
        "ACCOUNT_PER_DAY_UNVERIFIED",
        "ACCOUNT_PER_DAY_FREE",
        "ACCOUNT_PER_DAY_PRO",
        "ACCOUNT_PER_DAY_ENTERPRISE",
        "PROJECT_PER_DAY_FREE",
        "PROJECT_PER_DAY_PRO",
        "PROJECT_PER_DAY_ENTERPRISE",
    )
}


@contextlib.contextmanager
def running_server(
    argv: Sequence[str], data_dir: Path, port: int, env: dict[str, str] | None = None,
    start_timeout: float = 120.0,
) -> Iterator[Server]:  # fmt: skip
    """Start `argv` with BUILDBAY_DATA_DIR=data_dir, wait for /healthz (at most
    `start_timeout` seconds: a new database is migrated first, and on a loaded machine that
    alone took more than 30 s), stop it afterwards.

    The server's log goes to a file beside the data directory (a pipe nobody reads would fill
    up and stall the server); it is printed if the server does not come up.
    """
    log_path = data_dir.parent / f"server-{port}.log"
    full_env = {
        **os.environ,
        **NO_INVITATION_CAPS,
        "BUILDBAY_DATA_DIR": str(data_dir),
        "BUILDBAY_HOST": "127.0.0.1",
        "BUILDBAY_PORT": str(port),
        **(env or {}),
    }
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            list(argv), env=full_env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT
        )
    server = Server(process, f"http://127.0.0.1:{port}", log_path)
    try:
        _wait_healthy(server, start_timeout)
        yield server
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _wait_healthy(server: Server, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            break
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{server.base_url}/healthz", timeout=1).status_code == 200:
                return
        time.sleep(0.1)
    sys.stderr.write(server.log_path.read_text(errors="replace"))
    raise SystemExit(f"the server at {server.base_url} did not become healthy")


def register(client: httpx.Client) -> str:
    """A fresh free-plan user; returns its access token."""
    response = client.post(
        "/api/auth/register",
        json={"email": f"bench-{uuid.uuid4().hex[:12]}@example.com", "password": PASSWORD},
    )
    response.raise_for_status()
    return str(response.json()["access_token"])


def enterprise_account(client: httpx.Client, env: dict[str, str]) -> tuple[str, str]:
    """A fresh user moved to the enterprise plan with `buildbay users set-plan` (run with the
    server's environment `env`, BUILDBAY_DATA_DIR included): (e-mail, access token). Rate
    limiting stays on for it, but never refuses."""
    email = f"bench-{uuid.uuid4().hex[:12]}@example.com"
    answer = client.post("/api/auth/register", json={"email": email, "password": PASSWORD})
    answer.raise_for_status()
    subprocess.run(
        [str(VENV_BIN / "buildbay"), "users", "set-plan", email, "enterprise"],
        env={**os.environ, **env},
        check=True,
        capture_output=True,
    )
    return email, str(answer.json()["access_token"])


def create_project(client: httpx.Client, name: str) -> str:
    response = client.post("/api/projects", json={"name": name})
    response.raise_for_status()
    return str(response.json()["id"])


def create_application(
    client: httpx.Client, project_id: str, name: str, platform: str = "other"
) -> str:
    """An application of platform `other` (unless told): it takes any file, as the benches send
    generated bytes (an android or ios application takes only a readable .apk, .aab or .ipa,
    a desktop one only its platform's installers)."""
    response = client.post(
        f"/api/projects/{project_id}/applications", json={"name": name, "platform": platform}
    )
    response.raise_for_status()
    return str(response.json()["id"])


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[str(h) for h in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = []
    for n, row in enumerate(cells):
        cols = zip(row, widths, strict=True)
        lines.append("  ".join(c.rjust(w) if n else c.ljust(w) for c, w in cols))
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


@contextlib.contextmanager
def scaled_out(
    postgres: str, redis_url: str, database: str, data_dir: Path
) -> Iterator[dict[str, str]]:
    """The environment of a `buildbay serve` on PostgreSQL + Redis: `database` created afresh on
    the `postgres` server and migrated, the Redis database flushed; the database is dropped
    afterwards."""
    drop = f"DROP DATABASE IF EXISTS {database} WITH (FORCE)"
    asyncio.run(_postgres_admin(postgres, drop, f"CREATE DATABASE {database}"))
    redis.Redis.from_url(redis_url).flushdb()
    url = f"{postgres.replace('postgresql://', 'postgresql+asyncpg://')}/{database}"
    env = {"BUILDBAY_DATABASE_URL": url, "BUILDBAY_REDIS_URL": redis_url}
    try:
        subprocess.run(
            [str(VENV_BIN / "buildbay"), "db", "upgrade"],
            env={**os.environ, "BUILDBAY_DATA_DIR": str(data_dir), **env},
            check=True,
            capture_output=True,
        )
        yield env
    finally:
        asyncio.run(_postgres_admin(postgres, drop))


async def _postgres_admin(server_url: str, *statements: str) -> None:
    connection = await asyncpg.connect(f"{server_url}/postgres")
    try:
        for statement in statements:
            await connection.execute(statement)
    finally:
        await connection.close()

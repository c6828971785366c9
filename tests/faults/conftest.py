"""What the fault tests share: `buildbay serve` processes that a test may kill and start again,
private PostgreSQL and Redis servers that a test may stop, and polling with deadlines.

Everything listens on 127.0.0.1. Nothing here waits by sleeping for a guessed time: each wait
polls for the state it needs, with a deadline generous enough for a loaded 2-core machine.
The shared PostgreSQL (5432) and Redis (6379) are never touched: a test that stops a database
or a Redis starts a private one on a port of its own.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
from sqlalchemy import make_url

from buildbay.app import create_app
from buildbay.builds.sweeper import GRACE, Swept, sweep
from buildbay.clock import FrozenClock
from buildbay.config import Settings
from buildbay.db import migrate
from buildbay.db.engine import create_engine
from tests.conftest import REQUIRE_SERVICES, run_apart
from tests.processes import free_port

T = TypeVar("T")

DEADLINE = 60.0  # seconds any one wait may take before the test fails
# How often a wait polls the server's database: each read opens an engine and a connection
# (4 ms of processor time on SQLite, 10 ms on PostgreSQL and a backend process forked there,
# measured), which every 20 ms spent a fifth of a core on waiting for a lease to run out.
DATABASE_POLL = 0.1
IS_ROOT = os.geteuid() == 0


def wait_for(
    condition: Callable[[], T | bool | None],
    what: str,
    *,
    timeout: float = DEADLINE,
    interval: float = 0.02,
) -> T:
    """Poll `condition` until it returns something truthy, which is returned; fail after
    `timeout` seconds saying `what` was awaited."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result  # type: ignore[return-value]
        if time.monotonic() > deadline:
            pytest.fail(f"gave up after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


# -- a server process that can be killed and started again --------------------------------------


class Server:
    """`buildbay serve` on one fixed port, so that the URLs it signed still work after a
    restart (a client retries the very same upload URL)."""

    def __init__(self, env: dict[str, str], log_dir: Path, name: str = "server") -> None:
        self.env = dict(env)
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.env.setdefault("BUILDBAY_PUBLIC_URL", self.base)
        self.log_dir = log_dir
        self.name = name
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def data_dir(self) -> Path:
        return Path(self.env["BUILDBAY_DATA_DIR"])

    @property
    def sqlite_file(self) -> Path | None:
        """The SQLite database the server runs on; None on PostgreSQL."""
        url = self.env.get("BUILDBAY_DATABASE_URL")
        if url is None:
            return self.data_dir / "buildbay.sqlite3"
        parsed = make_url(url)
        return (
            Path(parsed.database)
            if parsed.get_backend_name() == "sqlite" and parsed.database
            else None
        )

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    @property
    def log_path(self) -> Path:
        return self.log_dir / f"{self.name}-{self.starts}.log"

    def log(self) -> str:
        return "".join(
            path.read_text(errors="replace")
            for path in sorted(self.log_dir.glob(f"{self.name}-*.log"))
        )

    def start(self) -> Server:
        assert self.process is None or self.process.poll() is not None, "already running"
        self.starts += 1
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "buildbay", "serve", "--port", str(self.port)],
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        # One client for the polls: `httpx.get` makes a client, and with it an SSL context
        # that loads the CA bundle, each call (27 ms of processor time, measured, every 20 ms
        # of a start: the test process spent a core on waiting).
        with httpx.Client(timeout=2) as http:
            wait_for(lambda: self._ready(http), f"{self.name} to answer /readyz\n{self.log()}")
        return self

    def _ready(self, http: httpx.Client) -> bool:
        assert self.process is not None
        assert self.process.poll() is None, f"{self.name} exited:\n{self.log()}"
        try:
            return http.get(f"{self.base}/readyz").status_code == 200
        except httpx.TransportError:
            return False

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL: no shutdown handler, no finally block, no flush runs.

        On SQLite, first checks that the server is not writing into an unlinked WAL: were it,
        the kill would lose every write since (and the test might not notice)."""
        assert self.process is not None
        if self.process.poll() is None and (database := self.sqlite_file) is not None:
            assert_sqlite_files_not_deleted(self.pid, database)
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[Callable[..., Server]]:
    """`servers(env)` makes a Server (not started); every one is stopped at the end."""
    made: list[Server] = []

    def make(env: dict[str, str], name: str = "server") -> Server:
        server = Server(env, tmp_path, name)
        made.append(server)
        return server

    yield make
    for server in made:
        server.stop()


# -- the product's steps over real HTTP ----------------------------------------------------------


def assert_problem_response(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    """RFC 9457 problem+json with this status and code (and, for a 503, Retry-After)."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = response.json()
    assert body["status"] == status
    assert body["code"] == code, body
    assert body["type"] == f"/problems/{code.replace('_', '-')}"
    assert body["title"]
    assert body["detail"]
    assert body["requestId"]
    if status == 503:
        assert int(response.headers["retry-after"]) >= 1
    return body


# -- storage on disk, and the sweeper with time moved forward ------------------------------------


def files_under(path: Path) -> list[Path]:
    return sorted(p for p in path.rglob("*") if p.is_file())


def sweep_later(env: dict[str, str], hours: float = 3) -> Swept:
    """One round of the real sweeper (what `serve` runs every interval, and `buildbay sweep`),
    on the server's own database and files, as if `hours` had passed: every upload link and
    the grace period after it have run out by then."""
    settings = Settings(
        data_dir=Path(env["BUILDBAY_DATA_DIR"]),
        database_url=env.get("BUILDBAY_DATABASE_URL"),
        secret_key=env["BUILDBAY_SECRET_KEY"],  # type: ignore[arg-type]
        sweep_interval_seconds=0,
    )
    assert timedelta(hours=hours) > GRACE + timedelta(seconds=settings.upload_link_ttl_seconds)
    clock = FrozenClock()
    clock.advance(hours=hours)
    ctx = create_app(settings, clock=clock, migrate_on_start=False).state.ctx
    swept: list[Swept] = []

    async def run() -> None:
        try:
            swept.append(
                await sweep(
                    ctx.sessions, ctx.storage, ctx.clock.now(), ctx.settings.resolved_public_url
                )
            )
        finally:
            await ctx.dispose()

    run_apart(run())
    return swept[0]


def assert_store_matches_builds(data_dir: Path, builds: list[dict[str, Any]]) -> None:
    """Every ready build has its whole bytes on disk (size and sha256 as the API says), no
    other object is stored, and no upload is left half-received."""
    store = data_dir / "builds"
    assert files_under(store / "incoming") == [], "a half-received upload was left behind"
    expected = {}
    for build in builds:
        assert build["status"] == "ready", f"a pending build survived the sweep: {build}"
        key = f"{build['projectId']}/{build['applicationId']}/{build['buildId']}"
        expected[store / "objects" / key] = build
    stored = [p for p in files_under(store / "objects") if not p.name.endswith(".sha256")]
    assert sorted(stored) == sorted(expected), "orphan bytes, or a ready build without its bytes"
    for path, build in expected.items():
        assert path.stat().st_size == build["fileSize"]
        with path.open("rb") as file:
            assert hashlib.file_digest(file, "sha256").hexdigest() == build["sha256"]


def assert_sqlite_files_not_deleted(pid: int, database: Path) -> None:
    """Process `pid` holds no deleted copy of `database` or of its `-wal` and `-shm` files.

    A process that keeps writing into a WAL another connection has unlinked commits into a
    file nobody else sees, and loses it all at a crash (see test_sqlite_beside_operators)."""
    names = {str(database) + suffix for suffix in ("", "-wal", "-shm")}
    deleted = []
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = str(fd.readlink())
        except FileNotFoundError:
            continue  # closed meanwhile
        if target.endswith(" (deleted)") and target.removesuffix(" (deleted)") in names:
            deleted.append(target)
    assert not deleted, f"the server writes into unlinked SQLite files: {deleted}"


# -- a private PostgreSQL cluster, which a test may stop -----------------------------------------


def _postgres_bin() -> Path | None:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    return found[-1].parent if found else None


@dataclass
class PrivatePostgres:
    """A throwaway cluster of our own (trust authentication, no durability), run as the
    postgres user: PostgreSQL refuses to run as root."""

    bin_dir: Path
    home: Path
    port: int = field(default_factory=free_port)

    @property
    def url(self) -> str:
        return f"postgresql+asyncpg://postgres@127.0.0.1:{self.port}/postgres"

    def _pg_ctl(self, *args: str) -> None:
        subprocess.run(
            ["runuser", "-u", "postgres", "--", str(self.bin_dir / "pg_ctl"), "-D",
             str(self.home / "data"), "-w", "-t", "60", *args],
            check=True, capture_output=True, timeout=90,
        )  # fmt: skip

    def init(self) -> None:
        subprocess.run(
            ["runuser", "-u", "postgres", "--", str(self.bin_dir / "initdb"), "-D",
             str(self.home / "data"), "-U", "postgres", "--auth=trust", "--no-sync", "-E",
             "UTF8"],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip

    def start(self) -> None:
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.home} -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off -c max_connections=60"
        )
        self._pg_ctl("-o", options, "-l", str(self.home / "postgres.log"), "start")

    def stop(self, mode: str = "fast") -> None:
        self._pg_ctl("-m", mode, "stop")

    def running(self) -> bool:
        return (self.home / "data" / "postmaster.pid").exists()


@pytest.fixture
def private_postgres() -> Iterator[PrivatePostgres]:
    """A migrated, running private cluster on a free port; stopped and removed at the end."""
    bin_dir = _postgres_bin()
    reason = None
    if not IS_ROOT:
        reason = "a private PostgreSQL is started as the postgres user, which needs root"
    elif bin_dir is None or shutil.which("runuser") is None:
        reason = "no /usr/lib/postgresql/*/bin/initdb (or runuser) on this machine"
    if reason is not None:
        if REQUIRE_SERVICES:
            pytest.fail(f"BUILDBAY_REQUIRE_SERVICES is set but {reason}")
        pytest.skip(reason)
    assert bin_dir is not None
    # Not under pytest's tmp_path: the postgres user cannot enter root's 0700 directories.
    home = Path(tempfile.mkdtemp(prefix="buildbay-faults-pg-"))
    shutil.chown(home, "postgres", "postgres")
    cluster = PrivatePostgres(bin_dir, home)
    try:
        cluster.init()
        cluster.start()

        async def upgrade() -> None:
            engine = create_engine(cluster.url)
            await migrate.upgrade(engine)
            await engine.dispose()

        run_apart(upgrade())
        yield cluster
    finally:
        if cluster.running():
            with contextlib.suppress(subprocess.SubprocessError):
                cluster.stop("immediate")
        shutil.rmtree(home, ignore_errors=True)


# -- a private Redis, which a test may kill -------------------------------------------------------


class PrivateRedis:
    def __init__(self, log_dir: Path) -> None:
        self.port = free_port()
        self.log_dir = log_dir
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        with (self.log_dir / f"redis-{self.port}.log").open("ab") as log:
            self.process = subprocess.Popen(
                ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                 "--appendonly", "no", "--dir", str(self.log_dir)],
                stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        wait_for(self._answers, "the private Redis to answer PING")

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    if shutil.which("redis-server") is None:
        if REQUIRE_SERVICES:
            pytest.fail("BUILDBAY_REQUIRE_SERVICES is set but redis-server is not installed")
        pytest.skip("redis-server is not installed")
    redis = PrivateRedis(tmp_path)
    redis.start()
    try:
        yield redis
    finally:
        redis.stop()


# -- traffic in the background --------------------------------------------------------------------


@dataclass
class Outcome:
    label: str
    status: int | None  # None: no HTTP answer at all
    problem_code: str | None = None
    retry_after: str | None = None
    rate_limit: str | None = None  # the RateLimit header
    error: str | None = None
    sent_at: float = 0.0  # time.monotonic() when the request was sent


class Traffic:
    """Requests in a thread of their own, one after another, until stopped: each outcome is
    kept, so that a test can say what every request during a fault was answered."""

    def __init__(self, base: str, requests: list[tuple[str, Callable[[httpx.Client], Any]]]):
        self._base = base
        self._requests = requests
        self._stop = threading.Event()
        self.outcomes: list[Outcome] = []
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(base_url=self._base, timeout=30) as http:
            while not self._stop.is_set():
                for label, send in self._requests:
                    self.outcomes.append(self._one(http, label, send))

    @staticmethod
    def _one(http: httpx.Client, label: str, send: Callable[[httpx.Client], Any]) -> Outcome:
        sent_at = time.monotonic()
        try:
            r = send(http)
        except httpx.TransportError as exc:
            return Outcome(label, None, error=repr(exc), sent_at=sent_at)
        code = None
        if r.headers.get("content-type", "").startswith("application/problem+json"):
            code = r.json().get("code")
        return Outcome(
            label,
            r.status_code,
            code,
            r.headers.get("retry-after"),
            r.headers.get("ratelimit"),
            sent_at=sent_at,
        )

    def __enter__(self) -> Traffic:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=60)

    def since(self, mark: float) -> list[Outcome]:
        """The outcomes of requests sent at or after `mark` (a time.monotonic() reading)."""
        return [outcome for outcome in list(self.outcomes) if outcome.sent_at >= mark]

    def count(self, condition: Callable[[Outcome], bool]) -> int:
        return sum(1 for outcome in list(self.outcomes) if condition(outcome))

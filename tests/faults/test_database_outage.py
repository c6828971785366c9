"""The database goes away under a running server, and comes back.

PostgreSQL: a private cluster is stopped during traffic, then started again. SQLite: the
database's files are made read-only (immutable, which binds root too) during traffic, then
writable again. Each time: requests answer 503 problem+json `database_unavailable` with
Retry-After (never a 500, never a dropped connection), `/readyz` answers 503, `/healthz` 200,
and the same process serves again by itself once the database is back.
"""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import PG_URL
from tests.faults.conftest import (
    IS_ROOT,
    Outcome,
    PrivatePostgres,
    Server,
    Traffic,
    assert_problem_response,
    wait_for,
)
from tests.processes import Uploader

pytestmark = [pytest.mark.slow, pytest.mark.faults]


def _traffic(base: str, user: Uploader) -> Traffic:
    """Reads, writes and logins, as clients send them."""
    names = iter(range(10**9))

    def create(http: httpx.Client) -> httpx.Response:
        return http.post("/api/projects", json={"name": f"p{next(names)}"}, headers=user.headers)

    def login(http: httpx.Client) -> httpx.Response:
        return http.post(
            "/api/auth/login", json={"email": "ci@example.com", "password": "a long password"}
        )

    requests: list[tuple[str, Callable[[httpx.Client], Any]]] = [
        ("list", lambda http: http.get("/api/projects", headers=user.headers)),
        ("create", create),
        ("upload", user.upload_small),
        ("login", login),
        ("builds", lambda http: http.get(user.base, headers=user.headers)),
    ]
    return Traffic(base, requests)


def _allowed(outcome: Outcome) -> bool:
    """A success, or the 503 the contract gives for an unreachable database."""
    if outcome.status is not None and 200 <= outcome.status < 300:
        return True
    return (
        outcome.status == 503
        and outcome.problem_code == "database_unavailable"
        and outcome.retry_after is not None
        and int(outcome.retry_after) >= 1
    )


def _ok(outcome: Outcome) -> bool:
    return outcome.status is not None and 200 <= outcome.status < 300


def _readyz(http: httpx.Client) -> httpx.Response:
    """Through the test's client: `httpx.get` would make a client (and load the CA bundle into
    an SSL context, 27 ms of processor time) at each poll."""
    return http.get("/readyz", timeout=30)


def _ride_out_an_outage(
    server: Server,
    user: Uploader,
    stop: Callable[[], None],
    start: Callable[[], None],
    *,
    reads_survive: bool = False,
) -> None:
    """Traffic runs while the database stops and comes back; every answer must be allowed
    (and, if `reads_survive`, reads keep succeeding while it is down)."""
    http = user.http
    with _traffic(server.base, user) as traffic:
        wait_for(lambda: traffic.count(_ok) >= 8, "traffic to flow before the fault")
        stop()
        down = wait_for(lambda: (r := _readyz(http)).status_code == 503 and r, "/readyz to fail")
        body = assert_problem_response(down, 503, "not_ready")
        assert body["checks"]["database"] == "failing"
        assert body["checks"]["storage"] == "ok"
        mark = len(traffic.outcomes)
        wait_for(
            lambda: sum(o.status == 503 for o in traffic.outcomes[mark:]) >= 8,
            "requests to answer 503 while the database is down",
        )
        # A write while it is down: refused, explained, and retryable.
        r = http.post("/api/projects", json={"name": "during"}, headers=user.headers)
        body = assert_problem_response(r, 503, "database_unavailable")
        assert "sql" not in r.text.lower()
        assert http.get("/healthz").status_code == 200  # the process itself is fine
        if reads_survive:
            during = traffic.outcomes[mark:]
            assert all(_ok(o) for o in during if o.label in ("list", "builds")), during
            assert http.get("/api/projects", headers=user.headers).status_code == 200

        start()
        wait_for(lambda: _readyz(http).status_code == 200, "/readyz to pass again")
        mark = len(traffic.outcomes)
        wait_for(
            lambda: sum(_ok(o) for o in traffic.outcomes[mark:]) >= 12,
            "requests to succeed again once the database is back",
        )
        recovered = traffic.outcomes[mark:]
        # Once back, nothing fails any more (every pooled connection was replaced).
        assert all(_ok(o) for o in recovered[-8:]), recovered[-8:]

    bad = [o for o in traffic.outcomes if not _allowed(o)]
    assert bad == [], bad[:10]
    assert traffic.count(lambda o: o.status == 503) >= 8
    # The same process, never restarted, and its writes land again.
    assert server.alive()
    assert server.starts == 1
    r = http.post("/api/projects", json={"name": "after"}, headers=user.headers)
    assert r.status_code == 201, r.text
    assert "unexpected error" not in server.log()


@pytest.mark.skipif(not PG_URL, reason="the PostgreSQL outage runs with the PostgreSQL suite")
def test_postgresql_stopping_under_traffic_is_503_and_the_process_recovers_by_itself(
    private_postgres: PrivatePostgres,
    server_env: dict[str, str],
    servers: Callable[..., Server],
) -> None:
    """Catches: asyncpg errors on a stopped server escaping as 500 or as a dropped connection;
    /readyz passing without a database; pooled connections to the stopped server staying in
    the pool after it returns (failures after recovery); a process that must be restarted."""
    env = dict(
        server_env,
        BUILDBAY_DATABASE_URL=private_postgres.url,
        BUILDBAY_RATE_LIMIT_ENABLED="false",
    )
    server = servers(env).start()
    with httpx.Client(base_url=server.base, timeout=30) as http:
        user = Uploader.sign_up(http)
        _ride_out_an_outage(server, user, private_postgres.stop, private_postgres.start)


def _chattr(flag: str, *paths: Path) -> None:
    subprocess.run(["chattr", flag, *map(str, paths)], check=True, capture_output=True)


def _skip_unless_chattr_works(directory: Path) -> None:
    if shutil.which("chattr") is None:
        pytest.skip("chattr (e2fsprogs) is not installed")
    probe = directory / "immutable-probe"
    probe.touch()
    try:
        _chattr("+i", probe)
    except subprocess.CalledProcessError as exc:
        pytest.skip(f"this file system cannot make a file immutable: {exc.stderr!r}")
    _chattr("-i", probe)


@pytest.mark.skipif(bool(PG_URL), reason="the SQLite outage runs with the SQLite suite")
@pytest.mark.skipif(not IS_ROOT, reason="making a file immutable (chattr +i) needs root")
def test_a_read_only_sqlite_database_under_traffic_is_503_and_the_process_recovers(
    server_env: dict[str, str], servers: Callable[..., Server], tmp_path: Path
) -> None:
    """The database file and its write-ahead log become immutable (as root, a chmod would not
    stop the server; a read-only remount is the same to SQLite). Catches: SQLite's
    `disk I/O error` / `attempt to write a readonly database` escaping as 500; /readyz
    passing because a SELECT still works; a connection opened while the file was read-only
    staying read-only in the pool forever, so that writes keep failing after the files are
    writable again."""
    env = dict(server_env, BUILDBAY_RATE_LIMIT_ENABLED="false")
    database = Path(env["BUILDBAY_DATABASE_URL"].split(":///", 1)[1])
    server = servers(env).start()
    files = [database, database.with_name(database.name + "-wal")]
    with httpx.Client(base_url=server.base, timeout=30) as http:
        user = Uploader.sign_up(http)
        _skip_unless_chattr_works(tmp_path)
        try:
            _ride_out_an_outage(
                server,
                user,
                lambda: _chattr("+i", *files),
                lambda: _chattr("-i", *files),
                reads_survive=True,
            )
        finally:
            _chattr("-i", *files)


@pytest.mark.skipif(bool(PG_URL), reason="a SQLite file's fault")
@pytest.mark.skipif(not IS_ROOT, reason="making a file immutable (chattr +i) needs root")
async def test_a_sqlite_connection_opened_while_the_file_was_read_only_is_not_kept(
    client: httpx.AsyncClient, database_url: str
) -> None:
    """The app's first connection is opened while the files are read-only, so SQLite opens it
    read-only. Catches: the pool keeping that connection, which then refuses every write with
    `attempt to write a readonly database` after the files are writable again."""
    database = Path(database_url.split(":///", 1)[1])
    _skip_unless_chattr_works(database.parent)
    keeper = sqlite3.connect(database)  # holds the write-ahead log open, as a server would
    keeper.execute("PRAGMA journal_mode=WAL")
    keeper.execute("SELECT * FROM alembic_version").fetchall()
    files = [database, database.with_name(database.name + "-wal")]
    register = {"email": "late@example.com", "password": "correct horse"}
    try:
        _chattr("+i", *files)
        try:
            r = await client.post("/api/auth/register", json=register)
            assert_problem_response(r, 503, "database_unavailable")
            r = await client.get("/readyz")
            assert r.status_code == 503
            assert r.json()["checks"]["database"] == "failing"
        finally:
            _chattr("-i", *files)
        r = await client.post("/api/auth/register", json=register)
        assert r.status_code == 201, r.text
        assert (await client.get("/readyz")).status_code == 200
    finally:
        keeper.close()

"""Fixtures: a real database built by the migrations, real files, the app over ASGI.

The suite runs on SQLite by default and on PostgreSQL when BUILDBAY_TEST_DATABASE_URL is set
(e.g. postgresql+asyncpg://postgres@127.0.0.1:5432/test).

Under pytest-xdist (`-n N`) each worker has a PostgreSQL database and a Redis database of its
own, derived from the ones given (see `_for_this_worker`): the tests reset, truncate and flush
them, and must never do so under another worker's feet.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import shutil
import socket
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Coroutine, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
import redis.asyncio
import uvicorn
from fastapi import FastAPI
from pwdlib import PasswordHash
from pwdlib.hashers.argon2 import Argon2Hasher
from sqlalchemy import event, make_url, text
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from buildbay.app import create_app
from buildbay.audit.retention import RETENTION_SETTING
from buildbay.auth import passwords
from buildbay.clock import FrozenClock
from buildbay.config import Settings
from buildbay.db import migrate
from buildbay.db.engine import create_engine
from buildbay.db.models import Base
from tests.leaks import LeakGuard
from tests.processes import free_port, running

# xdist names its workers gw0, gw1, ...; a run without xdist has no worker id.
WORKER = os.environ.get("PYTEST_XDIST_WORKER")
WORKER_INDEX = int(WORKER.removeprefix("gw")) if WORKER else 0


def _postgres_for_this_worker(url: str | None) -> str | None:
    """`.../test` for a run without xdist, `.../test_gw0`, `.../test_gw1`, ... for its workers."""
    if not url or not WORKER:
        return url
    parsed = make_url(url)
    return parsed.set(database=f"{parsed.database}_{WORKER}").render_as_string(hide_password=False)


def _redis_for_this_worker(url: str | None) -> str | None:
    """The Redis database number of the URL plus the worker's index: `.../5` gives gw0 5, gw1 6,
    ... (a Redis server has 16 databases, 0-15, unless configured otherwise)."""
    if not url or not WORKER:
        return url
    base, _, number = url.rstrip("/").rpartition("/")
    if not number.isdigit():
        base, number = url.rstrip("/"), "0"
    return f"{base}/{int(number) + WORKER_INDEX}"


PG_URL = _postgres_for_this_worker(os.environ.get("BUILDBAY_TEST_DATABASE_URL"))
REDIS_URL = _redis_for_this_worker(os.environ.get("BUILDBAY_TEST_REDIS_URL"))
# Set by .ci/run: a test that needs PostgreSQL or Redis fails instead of skipping without them.
REQUIRE_SERVICES = bool(os.environ.get("BUILDBAY_REQUIRE_SERVICES"))
TEST_SECRET = "test-secret-key-that-is-long-enough-0123456789"
BASE_URL = "http://testserver"


# Set by .ci/run for its second run of the suite, on PostgreSQL + Redis: only the tests that
# reach a database or Redis run again; the others (parsers, properties, the client's offline
# parts, the layering checks) proved everything they can in the first run, on SQLite.
BACKEND_TESTS_ONLY = bool(os.environ.get("BUILDBAY_TEST_BACKEND_ONLY"))
BACKEND_FIXTURES = frozenset({"migrated_database", "database_url", "redis_url"})
# A module that reads these names or variables itself, outside the fixtures above.
BACKEND_NAMES = ("PG_URL", "REDIS_URL", "BUILDBAY_TEST_DATABASE_URL", "BUILDBAY_TEST_REDIS_URL")


# Tests that reach a server only through its HTTP API, whatever database is behind it: a
# browser scenario tests the pages (their script, forms and layout; the console's reads and
# writes on PostgreSQL are the in-process tests'), the client's tests its retries, resumes and
# output, and schemathesis the API's contract (PostgreSQL's one difference there, NUL
# characters, has tests/api/test_nul_characters.py). They take half of the second run's time
# and prove nothing more on it.
_SAME_ON_ANY_BACKEND = (
    "tests/client/",
    # The CI integrations (the GitHub action's steps, the GitLab job, the docs' snippets): the
    # runners' scripts and the client they install reach the server over HTTP only, as
    # tests/client does; each install of the client (a venv, pip, the package index) costs
    # 9 to 17 s of processor time (measured), for nothing the first run left out.
    "tests/ci/",
    "tests/api/test_schemathesis.py",
    "tests/faults/test_slow_clients.py",  # uvicorn's connections and the body read timeout
    "tests/security/test_upload_connection.py",
    "tests/test_authorization_matrix.py",  # who may call what: the services decide it alike
    # electron-updater against a server: the feed downloads' reads are tests/desktop's own.
    "tests/desktop/test_electron_updater.py",
    # The outbox killed mid-delivery: on PostgreSQL its claims are the mail tests' (test_mail,
    # test_distribution_mail), through the same job worker.
    "tests/faults/test_webhooks.py",
    # SMTP down for a while: the outbox's retries, whose PostgreSQL side tests/jobs proves.
    "tests/faults/test_mail.py::test_mails_written_while_smtp_is_down_all_arrive_once_it_is_back",
    # Redis killed under traffic: the rate limiter's and /readyz's answers while the counters
    # are gone, whatever database the requests then read (the same users, uploads, logins;
    # Redis beside PostgreSQL is tests/ratelimit's and test_scale_out's). 8.5 s of CPU, and a
    # minute or more of one worker's time.
    "tests/faults/test_redis_outage.py",
    # The build store's disk full: the storage's writes refused, no file left on it; the
    # database is not on that disk in either run, and a pending build's rows are tests/builds'
    # on PostgreSQL.
    "tests/faults/test_disk_full.py",
    # Webhook URLs refused when saved: the URL's check answers 422 before anything is written
    # (a project and an account are made first, as in every test of tests/projects and
    # tests/auth on PostgreSQL).
    "tests/webhooks/test_ssrf.py::test_refused_endpoint_urls",
    "tests/webhooks/test_ssrf.py::test_a_url_the_sender_could_not_send_as_checked_is_refused_",
    # The OpenAPI document, /docs and /redoc: made from the routes and their models, which are
    # the same whatever the app's database or Redis (create_app mounts every router alike).
    "tests/test_openapi.py",
    # `buildbay` commands that take `server_env` only for its data directory and key: each
    # sets a database of its own (an SQLite file, an unreachable PostgreSQL address, the
    # embedded default) or stops at a setting before reaching any database.
    "tests/test_server_process.py::test_production_refuses_to_start_without_a_secret_key",
    "tests/test_server_process.py::test_db_upgrade_and_set_plan_commands",
    "tests/test_server_process.py::test_several_workers_need_redis",
    "tests/test_server_process.py::test_several_workers_share_one_port_and_one_migrated_schema",
    "tests/test_server_process.py::test_a_schema_a_newer_version_migrated_is_served_with_a_warning",
    "tests/test_server_process.py::test_a_database_not_reachable_yet_does_not_stop_the_server_",
    "tests/test_operator_commands.py::test_serve_refuses_a_database_",
    # Each plan's requests a minute, counted by the app's in-process limiter (the `app` fixture
    # has no Redis: the shared counters are tests/ratelimit/test_shared_counters.py's); the
    # database only reads the user's plan, as every authenticated request does in tests/auth.
    "tests/ratelimit/test_plan_limits.py",
)


def drives_chromium(item: pytest.Item) -> bool:
    """The test drives a real Chromium (tests/console/conftest.py's `chromium` fixture). Not
    "has a fixture named `browser`": that is the name of the httpx client that keeps cookies for
    the console's in-process tests (210 tests had one, 51 of them a Chromium); taken for browser
    tests, those ran after the Chromium tests of their worker, with Chromium still open and its
    event loop marked running in this thread, and failed ("Runner.run() cannot be called from
    a running event loop"); and they were left out of the PostgreSQL run, where they reach the
    database through the app like any other in-process test."""
    return "chromium" in getattr(item, "fixturenames", ())


def _reaches_a_backend(item: pytest.Item, sources: dict[str, str]) -> bool:
    fixtures = getattr(item, "fixturenames", ())
    if drives_chromium(item):
        return False
    if item.nodeid.startswith(_SAME_ON_ANY_BACKEND):
        return False
    if BACKEND_FIXTURES.intersection(fixtures):
        return True
    path = str(item.path)
    if path not in sources:
        sources[path] = item.path.read_text()
    return any(name in sources[path] for name in BACKEND_NAMES)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The slow tests (real processes, browsers, faults) first, each group in its order: xdist
    then hands them out across the workers at the start, instead of one worker taking a
    minutes-long test at the end while the others sit idle. Among them the browser tests come
    last and one after the other: a worker hands each of its tests out in this order, so it
    launches Chromium once for all of them rather than once a module (tests/console/conftest.py)."""
    if BACKEND_TESTS_ONLY:
        sources: dict[str, str] = {}
        reaches = {item: _reaches_a_backend(item, sources) for item in items}
        config.hook.pytest_deselected(items=[item for item in items if not reaches[item]])
        items[:] = [item for item in items if reaches[item]]
    items.sort(key=lambda item: (item.get_closest_marker("slow") is None, drives_chromium(item)))


async def _create_postgres_database(url: str) -> None:
    """Creates this worker's database if missing, over a connection to the database it is
    named after (BUILDBAY_TEST_DATABASE_URL's, which must exist)."""
    parsed = make_url(url)
    given = make_url(os.environ["BUILDBAY_TEST_DATABASE_URL"])
    admin = create_async_engine(
        given.render_as_string(hide_password=False),
        isolation_level="AUTOCOMMIT",  # CREATE DATABASE cannot run inside a transaction
        poolclass=NullPool,
    )
    try:
        async with admin.connect() as conn:
            exists = await conn.scalar(
                text("SELECT 1 FROM pg_database WHERE datname = :name"),
                {"name": parsed.database},
            )
            if not exists:
                await conn.execute(text(f'CREATE DATABASE "{parsed.database}"'))
    finally:
        await admin.dispose()


async def _reset_postgres(url: str) -> None:
    if WORKER:
        await _create_postgres_database(url)
    engine = create_engine(url)
    async with engine.begin() as conn:
        await conn.execute(text("DROP SCHEMA public CASCADE"))
        await conn.execute(text("CREATE SCHEMA public"))
    await migrate.upgrade(engine)
    await engine.dispose()


async def _migrate_sqlite(path: Path) -> None:
    engine = create_engine(f"sqlite+inline:///{path}")
    await migrate.upgrade(engine)
    await engine.dispose()


@pytest.fixture(scope="session")
def migrated_database(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Runs the migrations once per session: a template SQLite file, or the PostgreSQL schema."""
    if PG_URL:
        asyncio.run(_reset_postgres(PG_URL))
        return PG_URL
    template = tmp_path_factory.mktemp("template") / "buildbay.sqlite3"
    asyncio.run(_migrate_sqlite(template))
    return str(template)


def run_apart(work: Coroutine[Any, Any, None]) -> None:
    """`asyncio.run(work)` in a thread of its own: a fixture's teardown may run while this
    thread has an event loop going (Playwright's sync API keeps one for the browser tests)."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, work).result()


@pytest.fixture
def database_url(migrated_database: str, tmp_path: Path) -> Iterator[str]:
    if PG_URL:
        yield PG_URL
        run_apart(_truncate_postgres(PG_URL))
        return
    path = tmp_path / "buildbay.sqlite3"
    shutil.copyfile(migrated_database, path)
    yield f"sqlite+inline:///{path}"


async def _truncate_postgres(url: str) -> None:
    """Empties every table, children first, in one round trip of one transaction. A test
    leaves a few rows: this costs ~13 ms where TRUNCATE, which gives each table a new file,
    cost ~70 ms a test (measured: about 25 s of the PostgreSQL suite)."""
    tables = reversed(Base.metadata.sorted_tables)
    script = "".join(f"DELETE FROM {table.name};" for table in tables)  # noqa: S608 (our names)
    dsn = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    connection = await asyncpg.connect(dsn)
    try:
        # The audit log's trigger lets only the retention sweep delete (audit/retention.py).
        allow = f"SET LOCAL {RETENTION_SETTING} = 'on';"
        await connection.execute(f"BEGIN;{allow}{script}COMMIT;")  # simple protocol
    finally:
        await connection.close()


@pytest.fixture(autouse=True)
def fast_password_hashing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Argon2id at its lowest cost, so a register or login costs microseconds, not ~100 ms.

    The real parameters are checked in tests/auth/test_password_storage.py, which overrides this
    fixture.
    """
    cheap = PasswordHash((Argon2Hasher(time_cost=1, memory_cost=8, parallelism=1),))
    dummy = cheap.hash("buildbay-timing-equaliser")
    monkeypatch.setattr(passwords, "_hasher", cheap)
    monkeypatch.setattr(passwords, "_dummy_hash", lambda: dummy)


@dataclass(frozen=True)
class S3Server:
    """An S3-compatible server in a process of its own (moto's server mode), over real HTTP."""

    endpoint_url: str
    env: dict[str, str]  # what a process needs to reach it (credentials, region)

    def new_bucket(self, *, versioned: bool = False) -> str:
        import botocore.session

        name = f"buildbay-{uuid.uuid4().hex[:12]}"
        client = botocore.session.get_session().create_client(
            "s3", endpoint_url=self.endpoint_url, region_name=S3_REGION
        )
        client.create_bucket(Bucket=name)
        if versioned:
            client.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
        return name


S3_REGION = "us-east-1"
S3_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "buildbay-test",
    "AWS_SECRET_ACCESS_KEY": "buildbay-test-secret",
    "AWS_DEFAULT_REGION": S3_REGION,
}


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """Started once per test session; each test takes a bucket of its own."""
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    saved = {name: os.environ.get(name) for name in S3_CREDENTIALS}
    os.environ.update(S3_CREDENTIALS)  # botocore reads credentials from the environment
    env = {**os.environ, **S3_CREDENTIALS}
    moto = Path(sys.executable).parent / "moto_server"
    try:
        with running(
            [str(moto), "-H", "127.0.0.1", "-p", str(port)],
            env=env,
            log_path=tmp_path_factory.mktemp("s3") / "moto.log",
            ready_url=f"{endpoint}/",
        ):
            yield S3Server(endpoint, dict(S3_CREDENTIALS))
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@pytest.fixture
async def redis_url() -> str:
    """BUILDBAY_TEST_REDIS_URL, a Redis database the tests may flush, flushed."""
    if not REDIS_URL:
        if REQUIRE_SERVICES:
            pytest.fail("BUILDBAY_REQUIRE_SERVICES is set but BUILDBAY_TEST_REDIS_URL is not")
        pytest.skip("BUILDBAY_TEST_REDIS_URL is not set: no Redis to test")
    client = redis.asyncio.from_url(REDIS_URL)
    await client.flushdb()
    await client.aclose()
    return REDIS_URL


async def redis_clients(watcher: redis.asyncio.Redis) -> int:
    """The connections to `watcher`'s Redis database but its own: those of the code under test
    (each xdist worker has a database of its own, `redis_url`)."""
    database = watcher.get_connection_kwargs().get("db", 0)
    return sum(1 for c in await watcher.client_list() if int(c["db"]) == database) - 1


@pytest.fixture
def clock() -> FrozenClock:
    return FrozenClock()


@pytest.fixture
def settings(tmp_path: Path, database_url: str) -> Settings:
    return Settings(
        data_dir=tmp_path / "data",
        database_url=database_url,
        secret_key=TEST_SECRET,  # type: ignore[arg-type]
        public_url=BASE_URL,
        sweep_interval_seconds=0,
    )


@pytest.fixture
async def app(settings: Settings, clock: FrozenClock) -> AsyncIterator[FastAPI]:
    application = create_app(settings, clock=clock, migrate_on_start=False)
    yield application
    await application.state.ctx.dispose()


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as c:
        yield c


@pytest.fixture(scope="session")
def served_openapi(migrated_database: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The app's /openapi.json as it serves it (over ASGI), fetched once a session: the
    document is made from the routes and their models, the same for every test that reads it
    (an app built for each such test cost most of their time). Tests parse a copy each."""
    work = tmp_path_factory.mktemp("openapi")
    database_url = PG_URL
    if not database_url:
        shutil.copyfile(migrated_database, work / "buildbay.sqlite3")
        database_url = f"sqlite+inline:///{work / 'buildbay.sqlite3'}"
    settings = Settings(
        data_dir=work / "data",
        database_url=database_url,
        secret_key=TEST_SECRET,  # type: ignore[arg-type]
        public_url=BASE_URL,
        sweep_interval_seconds=0,
    )

    async def fetch() -> httpx.Response:
        app = create_app(settings, migrate_on_start=False)
        try:
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as client:
                return await client.get("/openapi.json")
        finally:
            await app.state.ctx.dispose()

    with concurrent.futures.ThreadPoolExecutor(1) as thread:  # an event loop of its own
        r = thread.submit(asyncio.run, fetch()).result()
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("application/json")
    return r.text


@pytest.fixture
def no_leaks(client: httpx.AsyncClient, settings: Settings) -> LeakGuard:
    """Fails any request of `client` whose response carries a hash, a secret shown before, the
    server's key, a stack trace or a server path (see tests/leaks.py)."""
    guard = LeakGuard(settings)
    guard.install(client)
    return guard


@dataclass
class Account:
    email: str
    password: str
    access_token: str
    refresh_token: str
    user: dict[str, Any]

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.access_token}"}


class Api:
    """Small helpers over the client so tests read as the product's steps."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client
        self._n = 0
        self._uploads = 0

    async def register(self, email: str | None = None, password: str = "correct horse") -> Account:
        self._n += 1
        email = email or f"user{self._n}@example.com"
        r = await self.client.post(
            "/api/auth/register", json={"email": email, "password": password}
        )
        assert r.status_code == 201, r.text
        body = r.json()
        return Account(email, password, body["access_token"], body["refresh_token"], body["user"])

    async def login(self, account: Account) -> Account:
        """The account logged in again: a second session, with its own refresh-token family."""
        r = await self.client.post(
            "/api/auth/login", json={"email": account.email, "password": account.password}
        )
        assert r.status_code == 200, r.text
        body = r.json()
        return Account(
            account.email, account.password, body["access_token"], body["refresh_token"],
            body["user"],
        )  # fmt: skip

    async def project(self, owner: Account, name: str = "Acme") -> dict[str, Any]:
        r = await self.client.post("/api/projects", json={"name": name}, headers=owner.headers)
        assert r.status_code == 201, r.text
        return r.json()

    async def application(
        self, owner: Account, project_id: str, name: str = "Acme Android", **fields: Any
    ) -> dict[str, Any]:
        r = await self.client.post(
            f"/api/projects/{project_id}/applications",
            json={"name": name, **fields},
            headers=owner.headers,
        )
        assert r.status_code == 201, r.text
        return r.json()

    async def add_member(
        self, owner: Account, project_id: str, member: Account, role: str
    ) -> dict[str, Any]:
        r = await self.client.post(
            f"/api/projects/{project_id}/members",
            json={"email": member.email, "role": role},
            headers=owner.headers,
        )
        assert r.status_code == 201, r.text
        return r.json()

    async def upload(
        self,
        account: Account,
        project_id: str,
        app_id: str,
        data: bytes | None = None,
        file_name: str = "app-release.apk",
        notes: str | None = None,
        source: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """All three steps; returns the ready build. Without `data`, bytes of their own each
        time: the same bytes again in an application are the build they already are. `source`:
        verify's."""
        if data is None:
            self._uploads += 1
            data = b"PK\x03\x04 a build %d" % self._uploads
        base = f"/api/app-distribution/{project_id}/{app_id}/builds"
        r = await self.client.post(
            f"{base}/upload-link",
            json={"fileName": file_name, "fileSize": len(data)},
            headers=account.headers,
        )
        assert r.status_code == 201, r.text
        link = r.json()
        r = await self.client.put(link["uploadUrl"], content=data, headers=link["uploadHeaders"])
        assert r.status_code == 200, r.text
        body: dict[str, Any] = {"buildId": link["buildId"]}
        if notes is not None:
            body["notes"] = notes
        if source is not None:
            body["source"] = source
        r = await self.client.post(f"{base}/verify", json=body, headers=account.headers)
        assert r.status_code == 200, r.text
        build: dict[str, Any] = r.json()
        return build


@pytest.fixture
def api(client: httpx.AsyncClient) -> Api:
    return Api(client)


@pytest.fixture
async def owner(api: Api) -> Account:
    return await api.register("owner@example.com")


def iso_z(value: datetime) -> str:
    """A UTC datetime as the API writes it: `2026-11-22T04:19:53Z`."""
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def statements_run(app: FastAPI, containing: str = "") -> list[str]:
    """The SQL statements `app` runs from now on that contain `containing` (all by default), on
    either of its engines (on PostgreSQL, reads have one of their own): a list that grows as
    they run, until the app's engines are disposed."""
    seen: list[str] = []

    def note(_c: object, _cursor: object, statement: str, *_rest: object) -> None:
        if containing in statement:
            seen.append(statement)

    ctx = app.state.ctx
    for engine in {ctx.engine.sync_engine, ctx.read_engine.sync_engine}:
        event.listen(engine, "before_cursor_execute", note)
    return seen


def assert_problem(
    response: httpx.Response, status: int, code: str | None = None
) -> dict[str, Any]:
    """The response is RFC 9457 problem+json with this status (and code)."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = response.json()
    assert body["status"] == status
    assert body["type"].startswith("/problems/")
    assert body["title"]
    assert body["detail"]
    assert body["requestId"]
    if code is not None:
        assert body["code"] == code, body
    return body


# -- a real `buildbay serve` process -------------------------------------------------------


@pytest.fixture
def server_env(tmp_path: Path, database_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BUILDBAY_")}
    env.update(
        BUILDBAY_DATA_DIR=str(tmp_path / "data"),
        BUILDBAY_DATABASE_URL=database_url,
        BUILDBAY_SECRET_KEY=TEST_SECRET,
    )
    return env


@pytest.fixture
def server(server_env: dict[str, str], tmp_path: Path) -> Iterator[str]:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with running(
        [sys.executable, "-m", "buildbay", "serve", "--port", str(port)],
        env=server_env,
        log_path=tmp_path / "server.log",
        ready_url=f"{base}/readyz",
    ):
        yield base


@pytest.fixture
def threaded_server(server_env: dict[str, str]) -> Iterator[str]:
    """The service as `buildbay serve` runs it, in a thread of this process."""
    with serving_in_thread(server_env) as base:
        yield base


@contextlib.contextmanager
def serving_a_copy(
    migrated_database: str, work: Path, more_env: dict[str, str] | None = None
) -> Iterator[str]:
    """A module's own server in a thread (`serving_in_thread`): its data under `work`, its
    database a copy of the migrated one (on PostgreSQL, the worker's own), with `more_env`."""
    if PG_URL:
        database_url = PG_URL
    else:
        shutil.copyfile(migrated_database, work / "buildbay.sqlite3")
        database_url = f"sqlite+inline:///{work / 'buildbay.sqlite3'}"
    env = {
        "BUILDBAY_DATA_DIR": str(work / "data"),
        "BUILDBAY_DATABASE_URL": database_url,
        "BUILDBAY_SECRET_KEY": TEST_SECRET,
        **(more_env or {}),
    }
    with serving_in_thread(env) as base:
        yield base


@contextlib.contextmanager
def serving_in_thread(env: dict[str, str]) -> Iterator[str]:
    """The service as `buildbay serve` runs it (the app, uvicorn, the lifespan with its job
    worker), from the same environment, but in a thread of this process: for tests that reach
    it over HTTP only (browsers, the client), which a process of its own would cost seconds of
    imports each (measured: the console's browser tests in 57 s instead of 86 s). Tests that
    kill, restart or count processes start real ones (`server`, tests/faults/conftest.py)."""
    # Bound here and handed to uvicorn: a port picked free and bound later could be taken by
    # another worker in between (uvicorn then exits its thread).
    listening = socket.create_server(("127.0.0.1", 0))
    port = listening.getsockname()[1]
    fields = {
        name.removeprefix("BUILDBAY_").lower(): value
        for name, value in env.items()
        if name.startswith("BUILDBAY_")
    }
    settings = Settings(**fields, host="127.0.0.1", port=port)
    config = uvicorn.Config(
        create_app(settings), host="127.0.0.1", port=port, http="httptools",
        server_header=False, access_log=False, log_level="warning", timeout_keep_alive=30,
    )  # fmt: skip
    served = uvicorn.Server(config)
    thread = threading.Thread(
        target=served.run, kwargs={"sockets": [listening]}, name=f"buildbay-{port}", daemon=True
    )
    thread.start()
    while not served.started:
        assert thread.is_alive(), "the server stopped while starting (its log is above)"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        served.should_exit = True
        thread.join(60)
        listening.close()

"""End to end over real HTTP: `buildbay serve` as its own process, then the whole product flow."""

from __future__ import annotations

import asyncio
import gc
import hashlib
import http.client
import sqlite3
import ssl
import sys
from pathlib import Path

import httpx
import pytest

from buildbay.app import create_app, served
from buildbay.config import Settings
from buildbay.webhooks.transport import ssl_context as webhook_ssl_context
from tests.builds.android_files import apk_of_size
from tests.conftest import TEST_SECRET
from tests.processes import free_port, running
from tests.test_operator_commands import operator_command, serve_refusing

pytestmark = pytest.mark.slow


def test_the_whole_product_flow_over_real_http(server: str) -> None:
    with httpx.Client(base_url=server, timeout=30) as http:
        r = http.post(
            "/api/auth/register", json={"email": "ci@example.com", "password": "a long password"}
        )
        assert r.status_code == 201, r.text
        auth = {"Authorization": f"Bearer {r.json()['access_token']}"}

        project = http.post("/api/projects", json={"name": "Acme"}, headers=auth).json()
        app = http.post(
            f"/api/projects/{project['id']}/applications",
            json={"name": "Acme for Android", "platform": "android"},
            headers=auth,
        ).json()
        base = f"/api/app-distribution/{project['id']}/{app['id']}/builds"

        data = apk_of_size(3 * 1024 * 1024 + 17)  # an Android application takes only an .apk
        r = http.post(
            f"{base}/upload-link",
            json={
                "fileName": "acme-1.0.apk",
                "fileSize": len(data),
                "sha256": hashlib.sha256(data).hexdigest(),
            },
            headers=auth,
        )
        assert r.status_code == 201, r.text
        link = r.json()
        assert link["uploadUrl"].startswith(server)

        r = http.put(link["uploadUrl"], content=data, headers=link["uploadHeaders"])
        assert r.status_code == 200, r.text
        assert r.json() == {
            "buildId": link["buildId"],
            "size": len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
        }

        r = http.post(
            f"{base}/verify", json={"buildId": link["buildId"], "notes": "1.0"}, headers=auth
        )
        assert r.status_code == 200, r.text
        assert r.json()["status"] == "ready"

        listed = http.get(base, headers=auth).json()
        assert [b["buildId"] for b in listed["builds"]] == [link["buildId"]]
        assert listed["nextCursor"] is None

        r = http.get(f"{base}/{link['buildId']}/download", headers=auth)
        assert r.status_code == 302
        r = http.get(r.headers["location"])
        assert r.status_code == 200
        assert r.content == data

        assert http.delete(f"{base}/{link['buildId']}", headers=auth).status_code == 204
        assert http.get(f"{base}/{link['buildId']}", headers=auth).status_code == 404


def test_production_refuses_to_start_without_a_secret_key(server_env: dict[str, str]) -> None:
    env = {k: v for k, v in server_env.items() if k != "BUILDBAY_SECRET_KEY"}
    env["BUILDBAY_ENV"] = "production"
    result = serve_refusing(env)
    assert result.returncode == 2
    assert "BUILDBAY_SECRET_KEY must be set in production" in result.stderr


def test_development_keeps_its_generated_secret_key_in_the_data_dir(
    server_env: dict[str, str], tmp_path: Path
) -> None:
    settings = Settings(data_dir=tmp_path / "dev")
    first = settings.signing_key
    assert (tmp_path / "dev" / "secret_key").stat().st_mode & 0o777 == 0o600
    assert Settings(data_dir=tmp_path / "dev").signing_key == first
    assert len(first) >= 32


def test_db_upgrade_and_set_plan_commands(tmp_path: Path, server_env: dict[str, str]) -> None:
    env = dict(server_env, BUILDBAY_DATABASE_URL=f"sqlite+aiosqlite:///{tmp_path / 'cli.db'}")
    assert "up to date" in operator_command(env, "db", "upgrade").stdout

    result = operator_command(env, "users", "set-plan", "nobody@example.com", "pro")
    assert result.returncode == 1
    assert "no user with e-mail nobody@example.com" in result.stderr

    async def register() -> None:
        settings = Settings(
            data_dir=Path(env["BUILDBAY_DATA_DIR"]),
            database_url=env["BUILDBAY_DATABASE_URL"],
            secret_key=TEST_SECRET,  # type: ignore[arg-type]
        )
        app = create_app(settings, migrate_on_start=False)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
            r = await c.post(
                "/api/auth/register", json={"email": "Pro@Example.com", "password": "12345678"}
            )
            assert r.status_code == 201
        await app.state.ctx.dispose()

    asyncio.run(register())
    result = operator_command(env, "users", "set-plan", "pro@example.com", "pro")
    assert "pro@example.com is now on the pro plan" in result.stdout
    result = operator_command(env, "users", "set-plan", "pro@example.com", "gold")
    assert result.returncode == 2


def test_several_workers_need_redis(server_env: dict[str, str]) -> None:
    result = serve_refusing(server_env, "--workers", "2")
    assert result.returncode == 2
    assert "--workers above 1 needs BUILDBAY_REDIS_URL" in result.stderr


def test_several_workers_share_one_port_and_one_migrated_schema(
    server_env: dict[str, str], tmp_path: Path, redis_url: str
) -> None:
    # The embedded default, which migrates itself: the parent does it once, before the workers.
    env = {k: v for k, v in server_env.items() if k != "BUILDBAY_DATABASE_URL"}
    env["BUILDBAY_REDIS_URL"] = redis_url
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = tmp_path / "workers.log"
    argv = [sys.executable, "-m", "buildbay", "serve", "--port", str(port), "--workers", "2"]
    with (
        running(argv, env=env, log_path=log, ready_url=f"{base}/readyz", timeout=60),
        httpx.Client(base_url=base, timeout=30) as http,
    ):
        r = http.post(
            "/api/auth/register", json={"email": "w@example.com", "password": "pw-123456"}
        )
        assert r.status_code == 201, r.text
        auth = {"Authorization": f"Bearer {r.json()['access_token']}"}
        # New connections, so that both workers answer some of them.
        for _ in range(20):
            with httpx.Client(base_url=base, timeout=30) as fresh:
                assert fresh.get("/api/projects", headers=auth).status_code == 200
    started = log.read_text().count("Started server process")
    assert started == 2, log.read_text()
    assert log.read_text().count("-> 0001, initial schema") == 1  # by the parent, once


def test_a_served_app_keeps_what_start_up_made_out_of_the_collectors_way(
    settings: Settings,
) -> None:
    """`buildbay serve` (one process or several) serves `served(app)`: the objects made at
    start-up are frozen, so that full collections no longer walk them while requests wait."""
    gc.unfreeze()
    try:
        served(create_app(settings, migrate_on_start=False))
        assert gc.get_freeze_count() > 100_000  # the modules, the app, its models and schemas
    finally:
        gc.unfreeze()


def test_a_served_app_loads_the_webhooks_tls_authorities_before_its_first_delivery(
    settings: Settings,
) -> None:
    webhook_ssl_context.cache_clear()
    gc.unfreeze()
    try:
        served(create_app(settings, migrate_on_start=False))
        assert webhook_ssl_context.cache_info().currsize == 1
        assert webhook_ssl_context().verify_mode is ssl.CERT_REQUIRED
    finally:
        gc.unfreeze()


def test_a_schema_a_newer_version_migrated_is_served_with_a_warning(
    server_env: dict[str, str], tmp_path: Path
) -> None:
    """A rolling upgrade: `buildbay db upgrade` ran for the new version, and a process of the
    old one restarts before its turn."""
    database = tmp_path / "newer.sqlite3"
    env = dict(
        server_env, BUILDBAY_ENV="production", BUILDBAY_DATABASE_URL=f"sqlite+inline:///{database}"
    )
    assert operator_command(env, "db", "upgrade").returncode == 0
    with sqlite3.connect(database) as db:
        db.execute("UPDATE alembic_version SET version_num = '9999'")
    port = free_port()
    log = tmp_path / "newer.log"
    argv = [sys.executable, "-m", "buildbay", "serve", "--port", str(port)]
    with running(argv, env=env, log_path=log, ready_url=f"http://127.0.0.1:{port}/readyz"):
        pass
    assert "the database's schema is newer than this version's" in log.read_text()


def test_a_database_not_reachable_yet_does_not_stop_the_server_starting(
    server_env: dict[str, str], tmp_path: Path
) -> None:
    """It answers 503 until the database is there (docs/operations.md), as it does when the
    database goes away later."""
    env = dict(
        server_env, BUILDBAY_DATABASE_URL=f"postgresql+asyncpg://x@127.0.0.1:{free_port()}/x"
    )
    port = free_port()
    log = tmp_path / "unreachable.log"
    argv = [sys.executable, "-m", "buildbay", "serve", "--port", str(port)]
    with running(argv, env=env, log_path=log, ready_url=f"http://127.0.0.1:{port}/healthz"):
        assert httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=10).status_code == 503
    assert "could not check the database's schema before starting" in log.read_text()


def test_a_secret_with_a_non_ascii_character_leaves_the_connection_serving_and_no_log(
    server: str, tmp_path: Path
) -> None:
    """A wrong secret of any text is a 4xx, and the connection it came on serves the next
    request (a 500 there made uvicorn close it: the next request was reset). Each refusal is
    followed by a request on the same socket, as a browser or a mail client's one-click sends
    it (tests/security/test_token_text.py has every secret's cases). Not a refusal given
    before its body was read: that one closes the connection on purpose (middleware.py)."""
    host, port = server.removeprefix("http://").split(":")
    user_id = "usr_" + "0" * 26
    refusals = [
        ("GET", "/install/inl_01ABCDEFGHJKMNPQRSTVWXYZ01.%C3%A9", b"", 404),
        ("GET", "/install/inl_01ABCDEFGHJKMNPQRSTVWXYZ01.%C3%A9/download", b"", 404),
        ("GET", f"/unsubscribe/{user_id}.%C3%A9", b"", 404),
        ("POST", "/logout", b"csrf=%C3%A9", 403),
    ]
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        connection.connect()
        socket_ = connection.sock
        for method, path, body, status in refusals:
            headers = {"Content-Type": "application/x-www-form-urlencoded"} if body else {}
            connection.request(method, path, body=body, headers=headers)
            refused = connection.getresponse()
            refused.read()
            assert refused.status == status, (method, path, refused.status)
            connection.request("GET", "/healthz")
            served = connection.getresponse()
            assert served.status == 200, (method, path)
            assert served.read()
            assert connection.sock is socket_, f"the connection closed after {method} {path}"
    finally:
        connection.close()
    log = (tmp_path / "server.log").read_text()
    assert "Exception in ASGI application" not in log
    # The access log names the addresses, not their secrets (tests/security/test_access_log.py).
    assert '"GET /install/{token}" 404' in log
    assert '"GET /install/{token}/download" 404' in log
    assert '"GET /unsubscribe/{token}" 404' in log
    assert "inl_01ABCDEFGHJKMNPQRSTVWXYZ01" not in log
    assert user_id not in log

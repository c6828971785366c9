"""Two `buildbay serve` processes sharing PostgreSQL, Redis and an S3-compatible server.

What one process does, the other sees at once: an upload started on one is verified on the other,
a logout on one is refused on the other, and a user's requests count once whichever process
answers. The bytes go to the bucket directly; neither process reads them.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import sys
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import httpx
import pytest
import redis
import yaml

from tests.builds.android_files import apk_of_size
from tests.conftest import (
    PG_URL,
    REDIS_URL,
    REQUIRE_SERVICES,
    TEST_SECRET,
    S3Server,
    _truncate_postgres,
    run_apart,
)
from tests.desktop.files import dmg
from tests.processes import free_port, running
from tests.test_operator_commands import operator_command

pytestmark = pytest.mark.slow

UPLOADS = 50


@pytest.fixture(scope="module")
def shared_env(
    migrated_database: str, s3_server: S3Server, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, str]]:
    """What both processes share, for the whole module: each test signs up a user of its own
    (its own projects, builds, token and request counts), so the tests need no more than one
    pair of processes between them (a pair for each test cost seconds of imports each). The
    database and Redis are emptied at the end, as `database_url` and `redis_url` do."""
    if not PG_URL:
        # .ci/run's PostgreSQL pass runs it; its SQLite pass has no database to share.
        pytest.skip("BUILDBAY_TEST_DATABASE_URL is not set: several processes need PostgreSQL")
    if not REDIS_URL:
        if REQUIRE_SERVICES:
            pytest.fail("BUILDBAY_REQUIRE_SERVICES is set but BUILDBAY_TEST_REDIS_URL is not")
        pytest.skip("BUILDBAY_TEST_REDIS_URL is not set: several processes need Redis")
    counters = redis.Redis.from_url(REDIS_URL)
    counters.flushdb()
    env = {k: v for k, v in os.environ.items() if not k.startswith("BUILDBAY_")}
    env.update(s3_server.env)
    env.update(
        BUILDBAY_DATA_DIR=str(tmp_path_factory.mktemp("scale-out") / "data"),
        BUILDBAY_DATABASE_URL=migrated_database,
        BUILDBAY_REDIS_URL=REDIS_URL,
        BUILDBAY_SECRET_KEY=TEST_SECRET,
        BUILDBAY_STORAGE="s3",
        BUILDBAY_S3_BUCKET=s3_server.new_bucket(),
        BUILDBAY_S3_ENDPOINT_URL=s3_server.endpoint_url,
        BUILDBAY_S3_REGION="us-east-1",
    )
    try:
        yield env
    finally:
        run_apart(_truncate_postgres(migrated_database))
        counters.flushdb()
        counters.close()


@pytest.fixture(scope="module")
def servers(
    shared_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[str]]:
    logs = tmp_path_factory.mktemp("scale-out-logs")
    with ExitStack() as stack:
        bases = []
        for n in range(2):
            port = free_port()
            base = f"http://127.0.0.1:{port}"
            stack.enter_context(
                running(
                    [sys.executable, "-m", "buildbay", "serve", "--port", str(port)],
                    env=shared_env,
                    log_path=logs / f"server-{n}.log",
                    ready_url=f"{base}/readyz",
                )
            )
            bases.append(base)
        yield bases


def _set_plan(env: dict[str, str], email: str, plan: str) -> None:
    """`buildbay users set-plan` (in this process: tests/test_operator_commands.py)."""
    done = operator_command(env, "users", "set-plan", email, plan)
    assert done.returncode == 0, done.stderr


async def _register(http: httpx.AsyncClient, base: str) -> tuple[str, dict[str, str]]:
    email = f"{uuid.uuid4().hex[:10]}@example.com"
    r = await http.post(f"{base}/api/auth/register", json={"email": email, "password": "pw-123456"})
    assert r.status_code == 201, r.text
    return email, {"Authorization": f"Bearer {r.json()['access_token']}"}


async def _app_of(http: httpx.AsyncClient, base: str, auth: dict[str, str]) -> tuple[str, str, str]:
    project = await http.post(f"{base}/api/projects", json={"name": "Scale"}, headers=auth)
    assert project.status_code == 201, project.text
    pid = project.json()["id"]
    app = await http.post(
        f"{base}/api/projects/{pid}/applications",
        json={"name": "Android", "platform": "android"},
        headers=auth,
    )
    assert app.status_code == 201, app.text
    return pid, app.json()["id"], f"/api/app-distribution/{pid}/{app.json()['id']}/builds"


async def _upload(
    http: httpx.AsyncClient, link_base: str, verify_base: str, builds: str, auth: dict[str, str]
) -> dict[str, Any]:
    data = apk_of_size(64 * 1024)  # an Android application takes only a readable .apk
    sha256 = hashlib.sha256(data).hexdigest()
    link = await http.post(
        f"{link_base}{builds}/upload-link",
        json={"fileName": "app.apk", "fileSize": len(data), "sha256": sha256},
        headers=auth,
    )
    assert link.status_code == 201, link.text
    target = link.json()
    # A presigned bucket URL: the bytes skip the API processes.
    assert "X-Amz-Signature=" in target["uploadUrl"]
    assert "/storage/" not in target["uploadUrl"]
    put = await http.put(target["uploadUrl"], content=data, headers=target["uploadHeaders"])
    assert put.status_code == 200, put.text
    verified = await http.post(
        f"{verify_base}{builds}/verify", json={"buildId": target["buildId"]}, headers=auth
    )
    assert verified.status_code == 200, verified.text
    build: dict[str, Any] = verified.json()
    assert build["status"] == "ready"
    assert build["sha256"] == sha256
    return build


async def test_an_upload_crosses_processes_and_downloads_from_the_bucket(
    servers: list[str],
) -> None:
    one, two = servers
    async with httpx.AsyncClient(timeout=30) as http:
        _, auth = await _register(http, one)
        _, _, builds = await _app_of(http, two, auth)

        build = await _upload(http, one, two, builds, auth)

        download = await http.get(f"{one}{builds}/{build['buildId']}/download", headers=auth)
        assert download.status_code == 302
        fetched = await http.get(download.headers["location"])
        assert fetched.status_code == 200
        assert hashlib.sha256(fetched.content).hexdigest() == build["sha256"]
        assert 'filename="app.apk"' in fetched.headers["content-disposition"]


async def test_a_logout_on_one_process_is_refused_on_the_other(servers: list[str]) -> None:
    one, two = servers
    async with httpx.AsyncClient(timeout=30) as http:
        _, auth = await _register(http, one)
        assert (await http.get(f"{two}/api/auth/me", headers=auth)).status_code == 200

        assert (await http.post(f"{one}/api/auth/logout", headers=auth)).status_code == 204

        refused = await http.get(f"{two}/api/auth/me", headers=auth)
        assert refused.status_code == 401
        assert refused.json()["code"] == "token_revoked"


async def test_a_free_users_minute_is_counted_across_both_processes(servers: list[str]) -> None:
    async with httpx.AsyncClient(timeout=30) as http:
        _, auth = await _register(http, servers[0])
        statuses = [
            (await http.get(f"{servers[n % 2]}/api/projects", headers=auth)).status_code
            for n in range(101)
        ]
    assert statuses[:100] == [200] * 100
    assert statuses[100] == 429


async def test_concurrent_uploads_spread_over_both_processes_all_land(
    servers: list[str], shared_env: dict[str, str]
) -> None:
    one, two = servers
    limits = httpx.Limits(max_connections=UPLOADS, max_keepalive_connections=UPLOADS)
    async with httpx.AsyncClient(timeout=60, limits=limits) as http:
        email, auth = await _register(http, one)
        # 100 API calls would spend a free minute.
        await asyncio.to_thread(_set_plan, shared_env, email, "enterprise")
        _, _, builds = await _app_of(http, one, auth)

        results = await asyncio.gather(
            *(
                _upload(http, servers[n % 2], servers[(n + 1) % 2], builds, auth)
                for n in range(UPLOADS)
            ),
            return_exceptions=True,
        )
        failures = [r for r in results if isinstance(r, BaseException)]
        assert failures == []

        ids = {r["buildId"] for r in results if isinstance(r, dict)}
        assert len(ids) == UPLOADS
        for base in (one, two):
            listed = await http.get(
                f"{base}{builds}", params={"status": "ready", "limit": 100}, headers=auth
            )
            assert listed.status_code == 200
            assert {b["buildId"] for b in listed.json()["builds"]} == ids


async def _desktop_build(
    http: httpx.AsyncClient, base: str, builds: str, auth: dict[str, str], version: str, size: int
) -> str:
    data = dmg(size)
    link = await http.post(
        f"{base}{builds}/upload-link",
        json={"fileName": f"App-{version}.dmg", "fileSize": len(data)},
        headers=auth,
    )
    assert link.status_code == 201, link.text
    target = link.json()
    put = await http.put(target["uploadUrl"], content=data, headers=target["uploadHeaders"])
    assert put.status_code == 200, put.text
    verified = await http.post(
        f"{base}{builds}/verify",
        json={"buildId": target["buildId"], "version": version, "buildNumber": version},
        headers=auth,
    )
    assert verified.status_code == 200, verified.text
    return str(target["buildId"])


async def test_a_feed_remembered_by_one_process_changes_with_a_write_on_the_other(
    servers: list[str],
) -> None:
    """Each process remembers the feeds it answered (feeds/cache.py); a build published, held
    back or deleted through the other is in (or out of) its next answer all the same."""
    one, two = servers
    async with httpx.AsyncClient(timeout=30) as http:
        _, auth = await _register(http, one)
        project = await http.post(f"{one}/api/projects", json={"name": "Mac"}, headers=auth)
        pid = project.json()["id"]
        app = await http.post(
            f"{one}/api/projects/{pid}/applications",
            json={"name": "Mac App", "platform": "macos"},
            headers=auth,
        )
        assert app.status_code == 201, app.text
        key = app.json()["updateKey"]
        builds = f"/api/app-distribution/{pid}/{app.json()['id']}/builds"
        first = await _desktop_build(http, one, builds, auth, "1.0", 64 * 1024)

        async def electron(base: str) -> dict[str, Any]:
            r = await http.get(f"{base}/feeds/{key}/electron/latest-mac.yml")
            assert r.status_code == 200, r.text
            body: dict[str, Any] = yaml.safe_load(r.text)
            return body

        def address(build_id: str, version: str) -> str:
            return f"/feeds/{key}/download/{build_id}/App-{version}.dmg"

        for base in (one, two):  # each remembers it
            assert (await electron(base))["version"] == "1.0"
            assert (await http.get(f"{base}{address(first, '1.0')}")).status_code == 307

        second = await _desktop_build(http, one, builds, auth, "2.0", 65 * 1024)
        assert (await electron(two))["version"] == "2.0"

        r = await http.put(
            f"{one}{builds}/{second}/channels",
            json={"channels": ["default"], "rolloutPercent": 20},
            headers=auth,
        )
        assert r.status_code == 200, r.text
        assert (await electron(two))["stagingPercentage"] == 20

        assert (await http.get(f"{two}{address(second, '2.0')}")).status_code == 307
        r = await http.delete(f"{one}{builds}/{second}", headers=auth)
        assert r.status_code == 204, r.text
        gone = await http.get(f"{two}{address(second, '2.0')}")
        assert gone.status_code == 404
        assert gone.json()["code"] == "unknown_build"
        assert (await electron(two))["version"] == "1.0"

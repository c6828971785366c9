"""Two `buildbay serve` processes sharing PostgreSQL, Redis and an S3-compatible server.

What one process does, the other sees at once: an upload started on one is verified on the other,
a logout on one is refused on the other, and a user's requests count once whichever process
answers. The bytes go to the bucket directly; neither process reads them.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.builds.android_files import apk_of_size
from tests.conftest import PG_URL, TEST_SECRET, S3Server
from tests.processes import free_port, running

pytestmark = pytest.mark.slow

UPLOADS = 50


@pytest.fixture
def shared_env(
    tmp_path: Path, database_url: str, redis_url: str, s3_server: S3Server
) -> dict[str, str]:
    if not PG_URL:
        # .ci/run's PostgreSQL pass runs it; its SQLite pass has no database to share.
        pytest.skip("BUILDBAY_TEST_DATABASE_URL is not set: several processes need PostgreSQL")
    env = {k: v for k, v in os.environ.items() if not k.startswith("BUILDBAY_")}
    env.update(s3_server.env)
    env.update(
        BUILDBAY_DATA_DIR=str(tmp_path / "data"),
        BUILDBAY_DATABASE_URL=database_url,
        BUILDBAY_REDIS_URL=redis_url,
        BUILDBAY_SECRET_KEY=TEST_SECRET,
        BUILDBAY_STORAGE="s3",
        BUILDBAY_S3_BUCKET=s3_server.new_bucket(),
        BUILDBAY_S3_ENDPOINT_URL=s3_server.endpoint_url,
        BUILDBAY_S3_REGION="us-east-1",
    )
    return env


@pytest.fixture
def servers(shared_env: dict[str, str], tmp_path: Path) -> Iterator[list[str]]:
    with ExitStack() as stack:
        bases = []
        for n in range(2):
            port = free_port()
            base = f"http://127.0.0.1:{port}"
            stack.enter_context(
                running(
                    [sys.executable, "-m", "buildbay", "serve", "--port", str(port)],
                    env=shared_env,
                    log_path=tmp_path / f"server-{n}.log",
                    ready_url=f"{base}/readyz",
                )
            )
            bases.append(base)
        yield bases


def _set_plan(env: dict[str, str], email: str, plan: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "buildbay", "users", "set-plan", email, plan],
        env=env,
        check=True,
        capture_output=True,
        timeout=60,
    )


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
        _set_plan(shared_env, email, "enterprise")  # 100 API calls would spend a free minute
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

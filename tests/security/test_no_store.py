"""Answers that hand out a secret are never kept by a cache: `Cache-Control: no-store` on every
API answer (buildbay.security_headers: a login's and a refresh's tokens, a new API token, a
webhook's signing secret when it is made and rotated, refusals too), and on the console's pages
that show a new API token or webhook secret once. A route that means to be cached says so
itself, and keeps it (the update check)."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from buildbay.config import Settings
from tests.conftest import BASE_URL, Account, Api

ORIGIN = {"Origin": BASE_URL}


@pytest.fixture
def settings(settings: Settings) -> Settings:
    # A receiver on this machine: the webhook is made, never sent to.
    return settings.model_copy(update={"webhook_allow_http": True, "webhook_allow_private": True})


def assert_no_store(r: httpx.Response, status: int, *fields: str) -> dict[str, Any]:
    assert r.status_code == status, r.text
    assert r.headers["cache-control"] == "no-store", r.headers
    body: dict[str, Any] = r.json() if r.content else {}
    for field in fields:
        assert body[field], body
    return body


async def test_every_answer_that_hands_out_a_secret_says_no_store(
    client: httpx.AsyncClient, api: Api
) -> None:
    credentials = {"email": "ada@example.com", "password": "correct horse"}
    r = await client.post("/api/auth/register", json=credentials)
    registered = assert_no_store(r, 201, "access_token", "refresh_token")
    auth = {"Authorization": f"Bearer {registered['access_token']}"}

    r = await client.post("/api/auth/login", json=credentials)
    logged_in = assert_no_store(r, 200, "access_token", "refresh_token")

    r = await client.post(
        "/api/auth/refresh-token", json={"refresh_token": logged_in["refresh_token"]}
    )
    assert_no_store(r, 200, "access_token", "refresh_token")

    r = await client.post("/api/account/api-tokens", json={"name": "ci"}, headers=auth)
    assert_no_store(r, 201, "token")

    project = (await client.post("/api/projects", json={"name": "Acme"}, headers=auth)).json()
    hooks = f"/api/projects/{project['id']}/webhooks"
    r = await client.post(
        hooks, json={"url": "http://127.0.0.1:9/hook", "events": ["build.ready"]}, headers=auth
    )
    webhook = assert_no_store(r, 201, "secret")
    assert webhook["secret"].startswith("whsec_")

    r = await client.post(f"{hooks}/{webhook['id']}/rotate-secret", headers=auth)
    rotated = assert_no_store(r, 200, "secret")
    assert rotated["secret"] != webhook["secret"]

    r = await client.get("/api/auth/me", headers=auth)
    assert_no_store(r, 200, "email")


async def test_refusals_say_no_store_too(client: httpx.AsyncClient, api: Api) -> None:
    await api.register("ada@example.com", "correct horse")
    wrong = {"email": "ada@example.com", "password": "not the password"}
    assert_no_store(await client.post("/api/auth/login", json=wrong), 401, "detail")
    # Refused by the middleware, before any route.
    r = await client.post("/api/auth/login", content=b"x", headers={"Content-Type": "text/plain"})
    assert_no_store(r, 400, "detail")
    assert_no_store(await client.get("/api/nothing-here"), 404, "detail")


async def test_an_answer_meant_for_caches_keeps_its_own(
    client: httpx.AsyncClient, api: Api, owner: Account
) -> None:
    project = await api.project(owner)
    app = await api.application(owner, project["id"])

    r = await client.get("/api/updates/check", params={"key": app["updateKey"], "versionCode": 1})

    assert r.status_code == 200, r.text
    assert r.headers["cache-control"] == "public, max-age=60"


def _csrf_of(page: httpx.Response) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert found, page.text[:300]
    return found.group(1)


async def test_console_pages_that_show_a_secret_once_say_no_store(
    client: httpx.AsyncClient, api: Api, owner: Account
) -> None:
    project = await api.project(owner)
    csrf = _csrf_of(await client.get("/login"))
    r = await client.post(
        "/login",
        data={"csrf": csrf, "email": owner.email, "password": owner.password},
        headers=ORIGIN,
    )
    assert r.status_code == 303, r.text
    csrf = _csrf_of(await client.get("/account"))

    r = await client.post("/account/tokens", data={"csrf": csrf, "name": "ci"}, headers=ORIGIN)
    assert r.status_code == 303, r.text  # shown on the page it leads to
    r = await client.get(r.headers["location"])
    assert r.status_code == 200, r.text
    assert re.search(r"\bbb_[A-Za-z0-9_-]{40,}", r.text), "the new token is on the page"
    assert r.headers["cache-control"] == "no-store"

    r = await client.post(
        f"/projects/{project['id']}/webhooks",
        data={"csrf": csrf, "url": "http://127.0.0.1:9/hook", "events": "build.ready"},
        headers=ORIGIN,
    )
    assert r.status_code == 303, r.text
    webhook_path = r.headers["location"]
    r = await client.get(webhook_path)
    assert r.status_code == 200, r.text
    assert "whsec_" in r.text
    assert r.headers["cache-control"] == "no-store"

    r = await client.post(f"{webhook_path}/rotate", data={"csrf": csrf}, headers=ORIGIN)
    assert r.status_code == 303, r.text
    r = await client.get(webhook_path)
    assert r.status_code == 200, r.text
    assert "whsec_" in r.text
    assert r.headers["cache-control"] == "no-store"

"""Every console form redirects after its POST (issue 36), the two that hand out a secret too: a
new API token and a webhook's signing secret are shown once, on the page the form redirects to,
from the login's own store (console/shown_once.py), so a reload makes no second token or
webhook and shows the secret no more."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import text

from buildbay.config import Settings
from tests.conftest import BASE_URL, Account, Api

ORIGIN = {"Origin": BASE_URL}
TOKEN = re.compile(r'<code id="new-token">(bb_[^<]+)</code>')
SECRET = re.compile(r'<code id="webhook-secret">(whsec_[^<]+)</code>')


@pytest.fixture
def settings(settings: Settings) -> Settings:
    # A receiver on this machine: the webhook is made, never sent to.
    return settings.model_copy(update={"webhook_allow_http": True, "webhook_allow_private": True})


def _browser(app: FastAPI) -> httpx.AsyncClient:
    """Keeps cookies as a browser does (the console's are Secure: https, in process)."""
    base = BASE_URL.replace("http://", "https://")
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=base)


@pytest.fixture
async def browser(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    async with _browser(app) as client:
        yield client


async def csrf_of(browser: httpx.AsyncClient, path: str) -> str:
    page = await browser.get(path)
    found = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert found, page.text[:300]
    return found[1]


async def sign_in(browser: httpx.AsyncClient, account: Account) -> None:
    data = {"email": account.email, "password": account.password}
    csrf = await csrf_of(browser, "/login")
    r = await browser.post("/login", data={"csrf": csrf, **data}, headers=ORIGIN)
    assert r.status_code == 303, r.text


async def count(app: FastAPI, table: str) -> int:
    async with app.state.ctx.sessions() as db:
        return int(await db.scalar(text(f"SELECT count(*) FROM {table}")) or 0)  # noqa: S608


async def test_a_new_api_token_is_shown_once_after_the_redirect_and_a_reload_makes_none(
    app: FastAPI, browser: httpx.AsyncClient, api: Api, owner: Account
) -> None:
    await sign_in(browser, owner)
    csrf = await csrf_of(browser, "/account")

    r = await browser.post("/account/tokens", data={"csrf": csrf, "name": "ci"}, headers=ORIGIN)

    assert r.status_code == 303, r.text
    assert r.headers["location"] == "/account#api-tokens"
    assert "bb_" not in r.text
    shown = await browser.get("/account")
    assert shown.headers["cache-control"] == "no-store"
    found = TOKEN.search(shown.text)
    assert found, shown.text
    assert "Token “ci” created." in shown.text
    works = await browser.get("/api/projects", headers={"Authorization": f"Bearer {found[1]}"})
    assert works.status_code == 200, works.text
    # Reloading the page the form led to: the secret is gone, and no second token was made.
    again = await browser.get("/account")
    assert again.status_code == 200
    assert TOKEN.search(again.text) is None
    assert found[1] not in again.text
    assert await count(app, "api_tokens") == 1
    assert await count(app, "secrets_shown_once") == 0


async def test_a_webhook_secret_is_shown_once_after_adding_and_after_rotating(
    app: FastAPI, browser: httpx.AsyncClient, api: Api, owner: Account
) -> None:
    project = await api.project(owner)
    hooks = f"/projects/{project['id']}/webhooks"
    await sign_in(browser, owner)
    csrf = await csrf_of(browser, hooks)
    form = {"csrf": csrf, "url": "http://127.0.0.1:9/hook", "events": "build.ready"}

    r = await browser.post(hooks, data=form, headers=ORIGIN)

    assert r.status_code == 303, r.text
    webhook_path = r.headers["location"]
    assert re.fullmatch(rf"{hooks}/whk_[0-9A-Z]+", webhook_path), webhook_path
    shown = await browser.get(webhook_path)
    secret = SECRET.search(shown.text)
    assert secret, shown.text
    assert "Webhook added." in shown.text
    again = await browser.get(webhook_path)
    assert SECRET.search(again.text) is None
    assert await count(app, "webhooks") == 1

    r = await browser.post(f"{webhook_path}/rotate", data={"csrf": csrf}, headers=ORIGIN)

    assert r.status_code == 303, r.text
    assert r.headers["location"] == webhook_path
    rotated = SECRET.search((await browser.get(webhook_path)).text)
    assert rotated, "the new secret is shown after the redirect"
    assert rotated[1] != secret[1]
    assert SECRET.search((await browser.get(webhook_path)).text) is None


async def test_the_browsers_half_alone_shows_nothing_to_another_login(
    app: FastAPI, browser: httpx.AsyncClient, api: Api, owner: Account
) -> None:
    await sign_in(browser, owner)
    csrf = await csrf_of(browser, "/account")
    r = await browser.post("/account/tokens", data={"csrf": csrf, "name": "ci"}, headers=ORIGIN)
    assert r.status_code == 303, r.text
    [name] = [c for c in browser.cookies if c.endswith("bb_shown")]
    half = browser.cookies[name]

    async with _browser(app) as other:  # the same account, signed in elsewhere
        await sign_in(other, owner)
        other.cookies.set(name, half)
        page = await other.get("/account")
        assert page.status_code == 200
        assert TOKEN.search(page.text) is None

    assert TOKEN.search((await browser.get("/account")).text), "the secret waits for its login"

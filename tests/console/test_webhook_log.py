"""The console's webhook pages without a browser (through the app itself, its worker run by the
test): a URL the sender could not send as checked is refused on the form in a sentence, and the
delivery log says "refused: not a public address" whether a name resolves to a private address
or does not resolve at all, never what it resolves to."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from html import unescape

import httpx
import pytest
from fastapi import FastAPI

from buildbay.app import create_app
from buildbay.clock import FrozenClock
from buildbay.config import Settings
from buildbay.context import AppContext
from tests.conftest import BASE_URL, Account, Api

ORIGIN = {"Origin": BASE_URL}


@pytest.fixture
def settings(settings: Settings) -> Settings:
    # A server that allows http:// endpoints, and no private address.
    return settings.model_copy(update={"webhook_allow_http": True, "webhook_allow_private": False})


@pytest.fixture
async def app(settings: Settings, clock: FrozenClock) -> AsyncIterator[FastAPI]:
    application = create_app(settings, clock=clock, migrate_on_start=False)
    yield application
    ctx: AppContext = application.state.ctx
    await ctx.webhook_sender.aclose()
    await ctx.dispose()


@pytest.fixture
async def console(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """A client that keeps cookies as a browser does (the console's are Secure: https)."""
    transport = httpx.ASGITransport(app=app)
    base = BASE_URL.replace("http://", "https://")
    async with httpx.AsyncClient(transport=transport, base_url=base) as client:
        yield client


async def _csrf(console: httpx.AsyncClient, path: str) -> str:
    page = await console.get(path)
    found = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert found, page.text[:300]
    return found.group(1)


async def _sign_in(console: httpx.AsyncClient, account: Account) -> None:
    csrf = await _csrf(console, "/login")
    r = await console.post("/login", headers=ORIGIN, data={
        "csrf": csrf, "email": account.email, "password": account.password,
    })  # fmt: skip
    assert r.status_code == 303, r.text


def _text(html: str) -> str:
    return unescape(re.sub(r"<[^>]+>", " ", html))


async def test_a_url_in_an_unusual_ip_spelling_is_refused_on_the_form_in_a_sentence(
    console: httpx.AsyncClient, api: Api, owner: Account
) -> None:
    project = await api.project(owner)
    await _sign_in(console, owner)
    path = f"/projects/{project['id']}/webhooks"
    for url, sentence in [
        ("http://0177.0.0.1/", "The address has a host that is an IP address written other "
                               "than as four decimal numbers; write it as they are usually "
                               "written, like 192.0.2.1."),
        ("http://①②⑦.0.0.1/", "The address has a host that spells an IP address in "
                              "characters other than ASCII digits; write it as IP addresses "
                              "are usually written, like 192.0.2.1."),
    ]:  # fmt: skip
        csrf = await _csrf(console, path)
        r = await console.post(path, headers=ORIGIN, data={
            "csrf": csrf, "url": url, "events": "build.ready", "description": "",
        })  # fmt: skip
        assert r.status_code == 422, r.text[:300]
        found = re.findall(
            r'<p class="error[^"]*" id="e-[^"]+" role="alert">(.*?)</p>', r.text, re.S
        )
        assert [unescape(t).strip() for t in found] == [sentence]
    page = await console.get(path)
    assert "No webhooks yet." in page.text


async def test_the_console_log_says_refused_not_a_public_address_and_nothing_more(
    console: httpx.AsyncClient, api: Api, owner: Account, app: FastAPI
) -> None:
    project = await api.project(owner)
    await _sign_in(console, owner)
    ctx: AppContext = app.state.ctx
    assert ctx.jobs is not None
    for url in ("http://localhost:8080/x", "https://hooks.nowhere.invalid/x"):
        r = await api.client.post(
            f"/api/projects/{project['id']}/webhooks",
            json={"url": url, "events": ["build.ready"]},
            headers=owner.headers,
        )
        assert r.status_code == 201, r.text
        webhook_id = r.json()["id"]
        page_path = f"/projects/{project['id']}/webhooks/{webhook_id}"
        csrf = await _csrf(console, page_path)
        sent = await console.post(f"{page_path}/test", headers=ORIGIN, data={"csrf": csrf})
        assert sent.status_code == 303, sent.text[:300]
        await ctx.jobs.run_until_idle()

        page = await console.get(page_path)
        assert page.status_code == 200
        log = _text(page.text[page.text.index("<table") :])
        assert "refused: not a public address" in log
        found = re.search(rf'href="({page_path}/deliveries/whd_[^"]+)"', page.text)
        assert found, page.text
        detail = await console.get(found.group(1))
        assert detail.status_code == 200
        attempts = _text(detail.text)
        assert "refused: not a public address" in attempts
        for text in (log, attempts):
            assert "127.0.0.1" not in text
            assert "::1" not in text
            assert "resolve" not in text


async def test_a_download_from_the_console_is_told_as_the_api_s_is(
    console: httpx.AsyncClient, api: Api, owner: Account
) -> None:
    """The console's download calls the builds service as the API's does: one install event
    and one build.downloaded event."""
    project = await api.project(owner)
    app = await api.application(owner, project["id"])
    r = await api.client.post(
        f"/api/projects/{project['id']}/webhooks",
        json={"url": "https://hooks.nowhere.invalid/x", "events": ["build.downloaded"]},
        headers=owner.headers,
    )
    assert r.status_code == 201, r.text
    deliveries = f"/api/projects/{project['id']}/webhooks/{r.json()['id']}/deliveries"
    build = await api.upload(owner, project["id"], app["id"])
    await _sign_in(console, owner)

    path = f"/projects/{project['id']}/apps/{app['id']}/builds/{build['buildId']}/download"
    r = await console.get(path)
    assert r.status_code == 302, r.text[:300]

    shown = await api.client.get(
        f"/api/app-distribution/{project['id']}/{app['id']}/builds/{build['buildId']}",
        headers=owner.headers,
    )
    assert shown.json()["downloadsCount"] == 1
    listed = (await api.client.get(deliveries, headers=owner.headers)).json()["deliveries"]
    assert [d["eventType"] for d in listed] == ["build.downloaded"]

"""A desktop application's page shows its feeds' addresses per channel, ready to paste, to
developers; and they are addresses the feeds answer at."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from html import unescape

import httpx
import pytest
import yaml
from fastapi import FastAPI

from tests.conftest import BASE_URL, Account, Api
from tests.desktop import files

ORIGIN = {"Origin": BASE_URL}


@pytest.fixture
async def browser_like(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    base = BASE_URL.replace("http://", "https://")
    async with httpx.AsyncClient(transport=transport, base_url=base) as client:
        yield client


async def _login(browser: httpx.AsyncClient, account: Account, password: str) -> None:
    page = await browser.get("/login")
    found = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert found
    r = await browser.post(
        "/login",
        data={"csrf": found.group(1), "email": account.email, "password": password},
        headers=ORIGIN,
    )
    assert r.status_code == 303, r.text


def _pasted(html: str) -> list[str]:
    return [unescape(text) for text in re.findall(r'class="copy" data-copy="([^"]*)"', html)]


@pytest.mark.parametrize("platform", ["macos", "windows", "linux"])
async def test_a_desktop_application_s_page_lists_its_feeds_per_channel(
    browser_like: httpx.AsyncClient, client: httpx.AsyncClient, api: Api, platform: str
) -> None:
    owner = await api.register("ada@example.com", "correct horse")
    tester = await api.register("tess@example.com", "correct horse")
    project = await api.project(owner)
    await api.add_member(owner, project["id"], tester, "tester")
    app = await api.application(owner, project["id"], "Desktop", platform=platform)
    base = f"/api/projects/{project['id']}/applications/{app['id']}"
    r = await client.post(f"{base}/channels", json={"name": "beta"}, headers=owner.headers)
    assert r.status_code == 201, r.text
    key = app["updateKey"]

    await _login(browser_like, owner, "correct horse")
    page = await browser_like.get(f"/projects/{project['id']}/apps/{app['id']}")
    assert page.status_code == 200
    pasted = _pasted(page.text)
    electron = f"{BASE_URL}/feeds/{key}/electron"
    for channel in ("latest", "beta"):
        publish = {"provider": "generic", "url": electron, "channel": channel}
        assert {"publish": publish} in [yaml.safe_load(t) for t in pasted if "publish" in t]
    sparkle = [f"{BASE_URL}/feeds/{key}/sparkle/{c}.xml" for c in ("default", "beta")]
    installer = [
        f"{BASE_URL}/feeds/{key}/appinstaller/{c}.appinstaller" for c in ("default", "beta")
    ]
    assert all((url in pasted) == (platform == "macos") for url in sparkle)
    assert all((url in pasted) == (platform == "windows") for url in installer)

    if platform == "macos":  # the address pasted is one the feed answers at
        data = files.dmg()
        await api.upload(owner, project["id"], app["id"], data, "A.dmg")
        r = await client.get(sparkle[0].removeprefix(BASE_URL))
        assert r.status_code == 200, r.text

    browser_like.cookies.clear()
    await _login(browser_like, tester, "correct horse")
    page = await browser_like.get(f"/projects/{project['id']}/apps/{app['id']}")
    assert f"/feeds/{key}" not in page.text  # as the key itself: a developer's


async def test_a_phone_application_s_page_lists_no_feeds(
    browser_like: httpx.AsyncClient, api: Api
) -> None:
    owner = await api.register("ada@example.com", "correct horse")
    project = await api.project(owner)
    app = await api.application(owner, project["id"], "Phone", platform="android")
    await _login(browser_like, owner, "correct horse")
    page = await browser_like.get(f"/projects/{project['id']}/apps/{app['id']}")
    assert page.status_code == 200
    assert app["updateKey"] in page.text
    assert "/feeds/" not in page.text

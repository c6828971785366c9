"""The account's devices page (issue 37): a person's own devices listed, renamed and removed
through forms that redirect after their POST, refusals as sentences beside the field, and
"Register this device" on an iPhone or iPad only. Through the app itself."""

from __future__ import annotations

from html import unescape

import httpx
import pytest
from fastapi import FastAPI

from buildbay.context import AppContext
from buildbay.db.engine import finish
from tests.conftest import Account, Api
from tests.console.test_mail_pages import browser, csrf, post, settings, sign_in, smtp
from tests.devices import DESKTOP, IPHONE
from tests.ios.console_devices import DAN_IPHONE, TESS_IPAD, TESS_IPHONE, enroll
from tests.ios.test_console_devices_install_page import text

__all__ = ["browser", "settings", "smtp"]

PAGE = "/account/devices"
ORIGIN = {"Origin": "http://testserver"}


async def _enroll(app: FastAPI, account: Account, udid: str, name: str,
                  model: str = "iPhone15,2") -> str:  # fmt: skip
    ctx: AppContext = app.state.ctx
    db = ctx.sessions()
    device_id = await enroll(db, account.user["id"], udid, name, model)
    await finish(db, ok=True)
    return device_id


@pytest.fixture
async def tess(api: Api, browser: httpx.AsyncClient) -> Account:
    account = await api.register("tess@example.com")
    await sign_in(browser, account.email)
    return account


async def test_the_page_lists_her_devices_and_the_account_page_leads_there(
    tess: Account, api: Api, app: FastAPI, browser: httpx.AsyncClient
) -> None:
    await _enroll(app, tess, TESS_IPHONE, "Tess's iPhone")
    await _enroll(app, tess, TESS_IPAD, "Tess's iPad", "iPad13,1")
    dan = await api.register("dan@example.com")
    await _enroll(app, dan, DAN_IPHONE, "Dan's iPhone")

    account = await browser.get("/account")
    r = await browser.get(PAGE)

    assert f'href="{PAGE}"' in account.text
    assert r.status_code == 200, r.text
    shown = text(r)
    for words in (f"iPhone (iPhone15,2), build 21F90 {TESS_IPHONE}", "iPad (iPad13,1)",
                  TESS_IPAD, "Tess's iPhone", "Tess's iPad"):  # fmt: skip
        assert words in shown or words in unescape(r.text), words
    assert DAN_IPHONE not in r.text
    assert "Dan's iPhone" not in r.text


async def test_register_this_device_shows_on_an_iphone_only(
    tess: Account, browser: httpx.AsyncClient
) -> None:
    iphone = await browser.get(PAGE, headers={"User-Agent": IPHONE})
    desktop = await browser.get(PAGE, headers={"User-Agent": DESKTOP})

    assert 'href="/devices/register.mobileconfig"' in iphone.text
    assert "Register this device" in iphone.text
    assert "register.mobileconfig" not in desktop.text
    assert "To register an iPhone or iPad, open this page on it, in Safari" in text(desktop)
    assert "No devices yet." in text(desktop)


async def test_a_device_is_renamed_and_a_bad_name_is_refused_beside_its_field(
    tess: Account, app: FastAPI, browser: httpx.AsyncClient
) -> None:
    device_id = await _enroll(app, tess, TESS_IPHONE, "iPhone")
    action = f"{PAGE}/{device_id}/name"

    r = await post(browser, action, {"name": "  Work iPhone "}, page=PAGE)

    assert (r.status_code, r.headers["location"]) == (303, f"{PAGE}#device-{device_id}")
    after = await browser.get(r.headers["location"])
    assert "Renamed to “Work iPhone”." in text(after)
    assert 'value="Work iPhone"' in after.text
    for name, said in [("", "Enter a name."),
                       ("x" * 51, "The name can be at most 50 characters.")]:  # fmt: skip
        r = await post(browser, action, {"name": name}, page=PAGE)
        assert r.status_code == 422, name
        assert said in text(r)
        assert f'aria-describedby="e-name-{device_id}"' in r.text
        assert "name:" not in text(r)  # no API field names
    assert 'value="Work iPhone"' in (await browser.get(PAGE)).text


async def test_a_device_is_removed_and_someone_else_s_is_not_found(
    tess: Account, api: Api, app: FastAPI, browser: httpx.AsyncClient
) -> None:
    mine = await _enroll(app, tess, TESS_IPHONE, "Tess's iPhone")
    dan = await api.register("dan@example.com")
    his = await _enroll(app, dan, DAN_IPHONE, "Dan's iPhone")

    r = await post(browser, f"{PAGE}/{mine}/delete", {}, page=PAGE)
    assert (r.status_code, r.headers["location"]) == (303, PAGE)
    after = await browser.get(PAGE)
    assert "Device removed." in text(after)
    assert TESS_IPHONE not in after.text

    token = await csrf(browser, PAGE)
    for action in (f"{PAGE}/{his}/delete", f"{PAGE}/{his}/name"):
        r = await browser.post(action, data={"csrf": token, "name": "Mine now"}, headers=ORIGIN)
        assert r.status_code == 404, r.text
        assert "You have no device with this id" in text(r)
    r = await api.client.get("/api/account/devices", headers=dan.headers)
    assert [d["name"] for d in r.json()["devices"]] == ["Dan's iPhone"]


async def test_signed_out_the_page_asks_to_sign_in(app: FastAPI) -> None:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="https://testserver") as anonymous:  # fmt: skip
        r = await anonymous.get(PAGE)
    assert (r.status_code, r.headers["location"]) == (303, "/login?next=/account/devices")

"""The project's devices page (issue 37), for developers: every device its members registered,
searched and paged, each against the newest ad-hoc build of each iOS application; the files for
Apple's device upload and for a spreadsheet; the developer's own mail per registered device.
Through the app itself."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from buildbay.console import project_devices
from buildbay.context import AppContext
from buildbay.db.engine import finish
from tests.conftest import Account
from tests.console.test_mail_pages import browser, post, sign_in
from tests.distribution.conftest import Team, settings, smtp, team
from tests.ios.console_devices import (
    DAN_IPHONE,
    TESS_IPAD,
    TESS_IPHONE,
    adhoc_ipa,
    enroll,
)
from tests.ios.test_console_devices_build_page import cells
from tests.ios.test_console_devices_install_page import text

__all__ = ["browser", "settings", "smtp", "team"]


class Lead:
    def __init__(self, team: Team) -> None:
        self.team = team
        self.tess: Account
        self.dan: Account
        self.ios: dict[str, Any]
        self.other: dict[str, Any]

    @property
    def page(self) -> str:
        return f"/projects/{self.team.project['id']}/devices"

    async def enroll(
        self, account: Account, udid: str, name: str, model: str = "iPhone15,2"
    ) -> None:
        ctx: AppContext = self.team.app.state.ctx
        db = ctx.sessions()
        await enroll(db, account.user["id"], udid, name, model)
        await finish(db, ok=True)

    async def build(self, application: dict[str, Any], data: bytes) -> dict[str, Any]:
        return await self.team.api.upload(
            self.team.owner, self.team.project["id"], application["id"], data, "acme.ipa"
        )


@pytest.fixture
async def lead(team: Team, browser: httpx.AsyncClient) -> Lead:
    lead = Lead(team)
    lead.tess = await team.member("tess@example.com")
    lead.dan = await team.member("dan@example.com", "developer")
    for account, name in ((lead.tess, "Tess Tester"), (lead.dan, "Dan Dev")):
        r = await team.client.put("/api/auth/me", json={"name": name}, headers=account.headers)
        assert r.status_code == 200, r.text
    project = team.project["id"]
    lead.ios = await team.api.application(team.owner, project, "Acme iOS", platform="ios")
    lead.other = await team.api.application(team.owner, project, "Acme Pad", platform="ios")
    await lead.enroll(lead.tess, TESS_IPHONE, "Tess's iPhone")
    await lead.enroll(lead.tess, TESS_IPAD, "Tess's iPad", "iPad13,1")
    await lead.enroll(lead.dan, DAN_IPHONE, "Dan's iPhone", "iPhone12,1")
    await sign_in(browser, team.owner.email)
    return lead


async def test_each_device_says_whether_each_ios_app_s_newest_ad_hoc_build_lists_it(
    lead: Lead, browser: httpx.AsyncClient
) -> None:
    await lead.build(lead.ios, adhoc_ipa([DAN_IPHONE], "1.0", "1"))
    await lead.build(lead.ios, adhoc_ipa([TESS_IPHONE, TESS_IPAD], "1.1", "2"))

    r = await browser.get(lead.page)

    assert r.status_code == 200, r.text
    assert cells(r, "table.devices") == [  # the most recently registered first
        ["Dan Dev dan@example.com", "Dan's iPhone", "iPhone (iPhone12,1)", DAN_IPHONE,
         "20 Nov 2026, 09:30 UTC", "missing", "—", "—"],
        ["Tess Tester tess@example.com", "Tess's iPad", "iPad (iPad13,1)", TESS_IPAD,
         "20 Nov 2026, 09:30 UTC", "in the profile", "—", "—"],
        ["Tess Tester tess@example.com", "Tess's iPhone", "iPhone (iPhone15,2)", TESS_IPHONE,
         "20 Nov 2026, 09:30 UTC", "in the profile", "—", "—"],
    ]  # fmt: skip
    shown = text(r)
    assert "Acme Pad: no ad-hoc or development build yet." in shown
    assert "In Acme iOS" in shown


async def test_the_list_is_searched_and_paged(
    lead: Lead, browser: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(project_devices, "DEVICES_PER_PAGE", 2)

    found = await browser.get(lead.page, params={"q": "tess"})
    first = await browser.get(lead.page)

    assert [row[1] for row in cells(found, "table.devices")] == ["Tess's iPad", "Tess's iPhone"]
    assert [row[1] for row in cells(first, "table.devices")] == ["Dan's iPhone", "Tess's iPad"]
    link = first.text.split('rel="next"')[0].rsplit('href="', 1)[1].split('"')[0]
    second = await browser.get(link.replace("&amp;", "&"))
    assert [row[1] for row in cells(second, "table.devices")] == ["Tess's iPhone"]
    assert "First page" in text(second)
    nothing = await browser.get(lead.page, params={"q": "nokia"})
    assert "No device matches “nokia”." in text(nothing)
    bad = await browser.get(lead.page, params={"cursor": "not-ours"})
    assert bad.status_code == 422
    assert "a page of devices that the console did not give out" in text(bad)


async def test_the_files_for_apple_and_a_spreadsheet_download(
    lead: Lead, browser: httpx.AsyncClient
) -> None:
    page = await browser.get(lead.page)
    assert f'href="{lead.page}/export?format=apple"' in page.text

    apple = await browser.get(f"{lead.page}/export", params={"format": "apple"})
    spreadsheet = await browser.get(f"{lead.page}/export", params={"format": "csv"})
    wrong = await browser.get(f"{lead.page}/export", params={"format": "xml"})

    assert apple.status_code == 200
    assert apple.headers["content-type"].startswith("text/tab-separated-values")
    assert apple.headers["content-disposition"] == 'attachment; filename="acme-devices.txt"'
    assert apple.text.splitlines() == [
        "Device ID\tDevice Name\tDevice Platform",
        f"{TESS_IPHONE}\tTess's iPhone\tios",
        f"{TESS_IPAD}\tTess's iPad\tios",
        f"{DAN_IPHONE}\tDan's iPhone\tios",
    ]
    assert spreadsheet.headers["content-type"].startswith("text/csv")
    assert spreadsheet.text.splitlines()[0].startswith("id,udid,name,model")
    assert len(spreadsheet.text.splitlines()) == 4
    assert wrong.status_code == 422
    assert "Choose the file for Apple's device upload, or the CSV file." in text(wrong)


async def test_a_developer_asks_for_a_mail_per_registered_device(
    lead: Lead, browser: httpx.AsyncClient
) -> None:
    api = f"/api/projects/{lead.team.project['id']}/members/me/device-mail"

    r = await post(browser, f"{lead.page}/mail", {"deviceMail": "on"}, page=lead.page)

    assert (r.status_code, r.headers["location"]) == (303, f"{lead.page}#device-mail")
    after = await browser.get(r.headers["location"])
    assert "You will get a mail for each device a member of this project registers." in text(after)
    assert 'name="deviceMail" checked' in after.text
    owner = lead.team.owner.headers
    assert (await lead.team.client.get(api, headers=owner)).json() == {"deviceMail": True}
    r = await post(browser, f"{lead.page}/mail", {}, page=lead.page)
    assert r.status_code == 303
    assert (await lead.team.client.get(api, headers=owner)).json() == {"deviceMail": False}


async def test_a_tester_has_neither_the_page_nor_the_link(
    lead: Lead, browser: httpx.AsyncClient
) -> None:
    project_page = f"/projects/{lead.team.project['id']}"
    assert f'href="{lead.page}"' in (await browser.get(project_page)).text
    browser.cookies.clear()
    await sign_in(browser, lead.tess.email)

    r = await browser.get(lead.page)
    export = await browser.get(f"{lead.page}/export")

    assert r.status_code == 403
    assert export.status_code == 403
    assert TESS_IPHONE not in r.text
    assert DAN_IPHONE not in export.text
    assert f'href="{lead.page}"' not in (await browser.get(project_page)).text

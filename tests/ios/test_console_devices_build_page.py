"""A build's page says which testers cannot install an ad-hoc or development .ipa, with their
devices, that any device can install an enterprise or App Store one, and that the devices of a
build verified before profiles' UDIDs were kept are not known. Developers only: a tester has no
build page (their own devices are on the install page). Through the app itself."""

from __future__ import annotations

import re
from html import unescape
from typing import Any

import httpx
import pytest

from buildbay.console import build_devices
from buildbay.context import AppContext
from buildbay.db.engine import finish
from tests.conftest import Account
from tests.console.test_mail_pages import browser, sign_in
from tests.distribution.conftest import Team, settings, smtp, team
from tests.ios.console_devices import (
    DAN_IPHONE,
    OLGA_IPHONE,
    TESS_IPAD,
    TESS_IPHONE,
    adhoc_ipa,
    enroll,
    forget_profile,
)
from tests.ios.test_console_devices_install_page import text

__all__ = ["browser", "settings", "smtp", "team"]


class Lead:
    """Team's owner on the build pages of an iOS application, with two testers."""

    def __init__(self, team: Team, app_: dict[str, Any]) -> None:
        self.team, self.application = team, app_
        self.tess: Account
        self.dan: Account

    async def build(self, data: bytes) -> dict[str, Any]:
        return await self.team.api.upload(
            self.team.owner, self.team.project["id"], self.application["id"], data, "acme.ipa"
        )

    def page(self, build: dict[str, Any]) -> str:
        return (
            f"/projects/{self.team.project['id']}/apps/{self.application['id']}"
            f"/builds/{build['buildId']}"
        )

    async def enroll(
        self, account: Account, udid: str, name: str, model: str = "iPhone15,2"
    ) -> None:
        ctx: AppContext = self.team.app.state.ctx
        db = ctx.sessions()
        await enroll(db, account.user["id"], udid, name, model)
        await finish(db, ok=True)


@pytest.fixture
async def lead(team: Team, browser: httpx.AsyncClient) -> Lead:
    r = await team.client.put("/api/auth/me", json={"name": "Olga Lead"},
                              headers=team.owner.headers)  # fmt: skip
    assert r.status_code == 200, r.text
    application = await team.api.application(team.owner, team.project["id"], "Acme iOS",
                                             platform="ios")  # fmt: skip
    lead = Lead(team, application)
    lead.tess = await team.member("tess@example.com")
    lead.dan = await team.member("dan@example.com", "developer")
    r = await team.client.put("/api/auth/me", json={"name": "Tess Tester"},
                              headers=lead.tess.headers)  # fmt: skip
    assert r.status_code == 200, r.text
    await sign_in(browser, team.owner.email)
    return lead


async def test_the_page_names_the_testers_who_cannot_install_with_their_devices(
    lead: Lead, browser: httpx.AsyncClient
) -> None:
    await lead.enroll(lead.tess, TESS_IPHONE, "Tess's iPhone")
    await lead.enroll(lead.tess, TESS_IPAD, "Tess's iPad", "iPad13,1")
    await lead.enroll(lead.dan, DAN_IPHONE, "Dan's phone", "iPhone12,1")
    await lead.enroll(lead.team.owner, OLGA_IPHONE, "Olga's iPhone")
    build = await lead.build(adhoc_ipa([OLGA_IPHONE, TESS_IPAD]))

    r = await browser.get(lead.page(build))

    assert r.status_code == 200, r.text
    shown = text(r)
    # Tess installs it on her iPad: she is not counted, but her iPhone is listed.
    assert "1 tester can't install this build: its ad-hoc profile lists none of their " in shown
    assert "2 enrolled devices can install it." in shown
    assert "Devices its profile misses" in shown
    assert cells(r, "table.devices-missing") == [
        ["dan", "Dan's phone", "iPhone (iPhone12,1)", DAN_IPHONE],
        ["Tess Tester", "Tess's iPhone", "iPhone (iPhone15,2)", TESS_IPHONE],
    ]
    assert OLGA_IPHONE not in r.text
    assert TESS_IPAD not in r.text


def cells(r: httpx.Response, table: str) -> list[list[str]]:
    """The text of each cell of each body row of the first `table.<class>` on the page."""
    tag, _, kind = table.partition(".")
    found = re.search(rf'<{tag} class="[^"]*\b{kind}\b[^"]*">.*?<tbody>(.*?)</tbody>', r.text, re.S)
    assert found, r.text
    return [
        [
            unescape(re.sub(r"<[^>]+>", "", cell)).strip()
            for cell in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
        ]
        for row in re.findall(r"<tr[^>]*>(.*?)</tr>", found.group(1), re.S)
    ]


async def test_a_long_list_of_missed_devices_is_cut_and_says_how_many_more(
    lead: Lead, browser: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(build_devices, "SHOWN_MISSING", 1)
    await lead.enroll(lead.tess, TESS_IPHONE, "Tess's iPhone")
    await lead.enroll(lead.tess, TESS_IPAD, "Tess's iPad", "iPad13,1")
    await lead.enroll(lead.dan, DAN_IPHONE, "Dan's phone", "iPhone12,1")
    build = await lead.build(adhoc_ipa([OLGA_IPHONE]))

    r = await browser.get(lead.page(build))

    shown = text(r)
    assert "2 testers can't install this build" in shown
    assert [row[1] for row in cells(r, "table.devices-missing")] == ["Dan's phone"]
    assert "And 2 more devices: the project's devices page lists them all." in shown


async def test_testers_who_can_install_on_one_of_their_devices_are_not_counted(
    lead: Lead, browser: httpx.AsyncClient
) -> None:
    await lead.enroll(lead.tess, TESS_IPHONE, "Tess's iPhone")
    await lead.enroll(lead.tess, TESS_IPAD, "Tess's iPad", "iPad13,1")
    build = await lead.build(adhoc_ipa([TESS_IPAD]))

    r = await browser.get(lead.page(build))

    shown = text(r)
    assert "can't install" not in shown
    assert "Every tester with a registered device can install this build on one of them, but " in (
        shown
    )
    assert cells(r, "table.devices-missing") == [
        ["Tess Tester", "Tess's iPhone", "iPhone (iPhone15,2)", TESS_IPHONE]
    ]


async def test_a_profile_that_lists_every_enrolled_device_says_so(
    lead: Lead, browser: httpx.AsyncClient
) -> None:
    nobody = await lead.build(adhoc_ipa([TESS_IPHONE], "2.4.0", "812"))
    assert "No tester has registered an iPhone or iPad yet." in text(
        await browser.get(lead.page(nobody))
    )
    await lead.enroll(lead.tess, TESS_IPHONE, "Tess's iPhone")
    build = await lead.build(adhoc_ipa([TESS_IPHONE], "2.4.1", "813", kind="development"))

    shown = text(await browser.get(lead.page(build)))

    assert "Every enrolled device of the project's testers can install this build (1 device)." in (
        shown
    )
    assert "can't install" not in shown


@pytest.mark.parametrize(("kind", "said"), [("enterprise", "an enterprise"),
                                            ("app-store", "an App Store")])  # fmt: skip
async def test_a_profile_for_any_device_says_any_device_can_install(
    lead: Lead, browser: httpx.AsyncClient, kind: str, said: str
) -> None:
    await lead.enroll(lead.tess, TESS_IPHONE, "Tess's iPhone")
    build = await lead.build(adhoc_ipa([], kind=kind))

    shown = text(await browser.get(lead.page(build)))

    assert f"Any device can install this build. Its profile is {said} profile" in shown
    assert "can't install" not in shown
    assert TESS_IPHONE not in shown


async def test_a_build_verified_before_profiles_were_kept_says_its_devices_are_not_known(
    lead: Lead, browser: httpx.AsyncClient
) -> None:
    await lead.enroll(lead.tess, TESS_IPHONE, "Tess's iPhone")
    build = await lead.build(adhoc_ipa([DAN_IPHONE]))
    ctx: AppContext = lead.team.app.state.ctx
    db = ctx.sessions()
    await forget_profile(db, build["buildId"])
    await finish(db, ok=True)

    shown = text(await browser.get(lead.page(build)))

    assert "This build was verified before Buildbay kept the devices of its provisioning " in shown
    assert "can't install" not in shown


async def test_an_apk_has_no_devices_and_a_tester_no_devices_section(
    lead: Lead, browser: httpx.AsyncClient
) -> None:
    await lead.enroll(lead.tess, TESS_IPHONE, "Tess's iPhone")
    apk = await lead.team.upload()
    ipa_build = await lead.build(adhoc_ipa([]))
    apk_page = (
        f"/projects/{lead.team.project['id']}/apps/{lead.team.application['id']}"
        f"/builds/{apk['buildId']}"
    )

    assert 'id="devices"' not in (await browser.get(apk_page)).text
    browser.cookies.clear()
    await sign_in(browser, lead.tess.email)
    r = await browser.get(lead.page(ipa_build))
    # Her own page of a build given to her (issue 38: she sends feedback from it), without the
    # team's devices section.
    assert r.status_code == 200
    assert 'id="devices"' not in r.text
    assert TESS_IPHONE not in r.text

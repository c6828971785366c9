"""The install page of an ad-hoc or development .ipa says, before the Install button, which of
its viewer's enrolled devices the build was not made for, and offers to register the device in
hand when none of theirs is enrolled (on an iPhone or iPad; elsewhere it says to open the page
there). The viewer is the personal link's tester, or whoever is signed in on a shared link's
page. Through the app itself; the browser walk is test_console_devices_browser.py."""

from __future__ import annotations

import re
from html import unescape
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from buildbay.context import AppContext
from buildbay.db.engine import finish
from tests.conftest import Account, statements_run
from tests.console.test_mail_pages import browser, sign_in
from tests.devices import ANDROID, DESKTOP, IPHONE
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

__all__ = ["browser", "settings", "smtp", "team"]

HTML = {"Accept": "text/html"}
IPAD = IPHONE.replace("iPhone; CPU iPhone OS", "iPad; CPU OS")
NOT_MADE_FOR = "This build was not made for your"


class Shelf:
    """An iOS application of Team's project, Tess a tester of it, and her personal links."""

    def __init__(self, team: Team, tess: Account, app_: dict[str, Any]) -> None:
        self.team, self.tess, self.application = team, tess, app_

    async def build(self, data: bytes, name: str = "acme.ipa") -> dict[str, Any]:
        return await self.team.api.upload(
            self.team.owner, self.team.project["id"], self.application["id"], data, name
        )

    async def personal_link(self, build: dict[str, Any]) -> str:
        """Tess's own link of the build, from her new-build mail: its path."""
        base = f"/api/app-distribution/{self.team.project['id']}/{self.application['id']}/builds"
        r = await self.team.client.post(
            f"{base}/{build['buildId']}/distribute",
            json={"emails": [self.tess.email], "notify": True},
            headers=self.team.owner.headers,
        )
        assert r.status_code == 200, r.text
        await self.team.run_jobs()
        mail = self.team.mails_to(self.tess.email)[-1]
        return mail.link("http://testserver/install/").removeprefix("http://testserver")

    async def shared_link(self, build: dict[str, Any]) -> str:
        base = f"/api/app-distribution/{self.team.project['id']}/{self.application['id']}/builds"
        r = await self.team.client.post(
            f"{base}/{build['buildId']}/install-link", headers=self.team.owner.headers
        )
        assert r.status_code in (200, 201), r.text
        return str(r.json()["url"]).removeprefix("http://testserver")

    async def enroll(
        self, account: Account, udid: str, name: str, model: str = "iPhone15,2"
    ) -> str:
        ctx: AppContext = self.team.app.state.ctx
        db = ctx.sessions()
        device_id = await enroll(db, account.user["id"], udid, name, model)
        await finish(db, ok=True)
        return device_id


@pytest.fixture
async def shelf(team: Team) -> Shelf:
    tess = await team.member("tess@example.com")
    application = await team.api.application(team.owner, team.project["id"], "Acme iOS",
                                             platform="ios")  # fmt: skip
    return Shelf(team, tess, application)


async def _page(client: httpx.AsyncClient, path: str, agent: str = IPHONE) -> httpx.Response:
    r = await client.get(path, headers={**HTML, "User-Agent": agent})
    assert r.status_code == 200, r.text
    return r


def text(r: httpx.Response) -> str:
    """The page's words as read: tags gone (inline ones without a space), spaces collapsed."""
    return unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", r.text)))


def _before_install(r: httpx.Response, words: str) -> None:
    """`words` are on the page, before its Install button."""
    shown = text(r)
    assert words in shown, shown
    assert shown.index(words) < shown.index("Install ", shown.index("Version")), shown


async def test_a_tester_whose_iphone_the_profile_misses_is_told_so_before_install(
    shelf: Shelf, client: httpx.AsyncClient
) -> None:
    await shelf.enroll(shelf.tess, TESS_IPHONE, "Tess's iPhone")
    build = await shelf.build(adhoc_ipa([DAN_IPHONE]))
    link = await shelf.personal_link(build)

    r = await _page(client, link)

    _before_install(
        r, f"This build was not made for your iPhone (UDID {TESS_IPHONE}). "
        "The developers have been told.",
    )  # fmt: skip
    assert "Register this device" not in r.text


async def test_an_ipad_is_named_an_ipad_and_the_device_in_hand_is_the_one_said(
    shelf: Shelf, client: httpx.AsyncClient
) -> None:
    await shelf.enroll(shelf.tess, TESS_IPHONE, "Tess's iPhone")
    await shelf.enroll(shelf.tess, TESS_IPAD, "Tess's iPad", "iPad13,1")
    link = await shelf.personal_link(await shelf.build(adhoc_ipa([TESS_IPHONE])))

    on_ipad = text(await _page(client, link, IPAD))
    on_iphone = text(await _page(client, link, IPHONE))

    assert f"This build was not made for your iPad (UDID {TESS_IPAD})." in on_ipad
    assert TESS_IPHONE not in on_ipad
    assert NOT_MADE_FOR not in on_iphone
    assert "Made for your iPhone “Tess's iPhone”." in on_iphone


async def test_a_page_that_cannot_tell_which_device_opens_it_lists_all_those_missed(
    shelf: Shelf, client: httpx.AsyncClient
) -> None:
    await shelf.enroll(shelf.tess, TESS_IPHONE, "Work phone")
    await shelf.enroll(shelf.tess, DAN_IPHONE, "Old phone", "iPhone12,1")
    await shelf.enroll(shelf.tess, TESS_IPAD, "Tablet", "iPad13,1")
    link = await shelf.personal_link(await shelf.build(adhoc_ipa([TESS_IPAD])))

    desktop = text(await _page(client, link, DESKTOP))
    iphone = text(await _page(client, link, IPHONE))

    for shown in (desktop, iphone):
        assert f"Work phone (iPhone, UDID {TESS_IPHONE})" in shown
        assert f"Old phone (iPhone, UDID {DAN_IPHONE})" in shown
        assert "The developers have been told." in shown
    assert "This build was not made for your iPhones:" in desktop
    assert "It installs on your iPad “Tablet”." in desktop
    assert "This build was not made for your iPhones:" in iphone
    assert "Tablet" not in iphone  # an iPhone opens it: the iPad is not the device in hand


async def test_a_tester_with_no_device_enrolled_is_offered_to_register_this_one(
    shelf: Shelf, client: httpx.AsyncClient
) -> None:
    link = await shelf.personal_link(await shelf.build(adhoc_ipa([DAN_IPHONE])))

    iphone = await _page(client, link, IPHONE)
    desktop = await _page(client, link, DESKTOP)
    android = await _page(client, link, ANDROID)

    token = link.removeprefix("/install/")
    assert f'href="/install/{token}/register-device"' in iphone.text
    _before_install(iphone, "Register this device")
    assert NOT_MADE_FOR not in iphone.text
    # Elsewhere, no link that cannot work there: where to open the page instead.
    assert "register-device" not in desktop.text
    assert "To register your iPhone or iPad, open this page on it" in text(desktop)
    assert "register" not in text(android).lower()
    # An iPad with only an iPhone enrolled: the iPad in hand is offered.
    await shelf.enroll(shelf.tess, TESS_IPHONE, "Tess's iPhone")
    ipad = await _page(client, link, IPAD)
    assert f'href="/install/{token}/register-device"' in ipad.text
    assert NOT_MADE_FOR not in ipad.text


async def test_a_shared_link_speaks_of_whoever_is_signed_in_and_offers_others_to_sign_in(
    shelf: Shelf, client: httpx.AsyncClient, browser: httpx.AsyncClient
) -> None:
    await shelf.enroll(shelf.tess, TESS_IPHONE, "Tess's iPhone")
    build = await shelf.build(adhoc_ipa([DAN_IPHONE]))
    link = await shelf.shared_link(build)

    signed_out = await _page(client, link)
    await sign_in(browser, shelf.tess.email)
    tess = await _page(browser, link)
    browser.cookies.clear()
    await sign_in(browser, shelf.team.owner.email)
    owner = await _page(browser, link)

    assert NOT_MADE_FOR not in signed_out.text
    assert f'href="/login?next=%2Finstall%2F{link.removeprefix("/install/")}"' in (
        unescape(signed_out.text)
    )
    assert f"This build was not made for your iPhone (UDID {TESS_IPHONE})." in text(tess)
    assert f'href="/devices/register.mobileconfig?build={build["buildId"]}"' in unescape(owner.text)
    assert TESS_IPHONE not in owner.text


@pytest.mark.parametrize("kind", ["enterprise", "app-store"])
async def test_a_profile_for_any_device_says_nothing_of_devices(
    shelf: Shelf, client: httpx.AsyncClient, kind: str
) -> None:
    await shelf.enroll(shelf.tess, TESS_IPHONE, "Tess's iPhone")
    link = await shelf.personal_link(await shelf.build(adhoc_ipa([], kind=kind)))

    r = await _page(client, link)

    assert NOT_MADE_FOR not in r.text
    assert "register" not in text(r).lower()


async def test_a_build_verified_before_profiles_were_kept_warns_nobody(
    shelf: Shelf, client: httpx.AsyncClient
) -> None:
    await shelf.enroll(shelf.tess, TESS_IPHONE, "Tess's iPhone")
    build = await shelf.build(adhoc_ipa([TESS_IPHONE, DAN_IPHONE]))
    link = await shelf.personal_link(build)
    ctx: AppContext = shelf.team.app.state.ctx
    db = ctx.sessions()
    await forget_profile(db, build["buildId"])
    await finish(db, ok=True)

    r = await _page(client, link)

    assert NOT_MADE_FOR not in r.text
    assert "Register this device" not in r.text


async def test_device_names_are_shown_as_text(shelf: Shelf, client: httpx.AsyncClient) -> None:
    await shelf.enroll(shelf.tess, TESS_IPHONE, '<img src=x onerror="alert(1)"> \u202eenohp')
    await shelf.enroll(shelf.tess, DAN_IPHONE, "Second")
    link = await shelf.personal_link(await shelf.build(adhoc_ipa([OLGA_IPHONE])))

    r = await _page(client, link)

    assert "<img src=x" not in r.text
    assert "&lt;img src=x onerror=&#34;alert(1)&#34;&gt; enohp" in r.text
    assert "\u202e" not in r.text


async def test_the_application_page_says_which_builds_were_not_made_for_her_iphone(
    shelf: Shelf, browser: httpx.AsyncClient, app: FastAPI
) -> None:
    await shelf.enroll(shelf.tess, TESS_IPHONE, "Tess's iPhone")
    await shelf.enroll(shelf.tess, TESS_IPAD, "Tess's iPad", "iPad13,1")
    for_dan = await shelf.build(adhoc_ipa([DAN_IPHONE], "1.0", "1"), "for-dan.ipa")
    for_ipad = await shelf.build(adhoc_ipa([TESS_IPAD], "1.1", "2"), "for-ipad.ipa")
    for_her = await shelf.build(adhoc_ipa([TESS_IPHONE], "1.2", "3"), "for-her.ipa")
    unknown = await shelf.build(adhoc_ipa([DAN_IPHONE], "1.3", "4"), "unknown.ipa")
    for build in (for_dan, for_ipad, for_her, unknown):
        await shelf.personal_link(build)  # distributed to her
    ctx: AppContext = app.state.ctx
    db = ctx.sessions()
    await forget_profile(db, unknown["buildId"])
    await finish(db, ok=True)
    await sign_in(browser, shelf.tess.email)
    path = f"/projects/{shelf.team.project['id']}/apps/{shelf.application['id']}"
    seen = statements_run(app, "build_profile_devices")

    iphone = await browser.get(path, headers={"User-Agent": IPHONE})
    desktop = await browser.get(path, headers={"User-Agent": DESKTOP})

    def note(r: httpx.Response, build: dict[str, Any]) -> str | None:
        row = r.text.split(f'id="build-{build["buildId"]}"')[1].split("</tr>")[0]
        found = re.search(r'<p class="why not-for-you">(.*?)</p>', row)
        return unescape(found.group(1)) if found else None

    assert len(seen) == 2  # one statement a page
    assert (
        note(iphone, for_dan)
        == "Not made for your iPhone (Tess's iPhone): it will not install there."
    )
    assert (
        note(iphone, for_ipad)
        == "Not made for your iPhone (Tess's iPhone): it will not install there."
    )
    assert note(iphone, for_her) is None
    assert note(iphone, unknown) is None
    assert note(desktop, for_dan) == (
        "Not made for your devices (Tess's iPhone, Tess's iPad): it will not install there."
    )
    assert note(desktop, for_ipad) is None  # it installs on one of hers

"""Issue 37 in a real browser: the tester's day (the install page on an iPhone offers "Register
this device", whose profile her iPhone answers; once it is enrolled and the build's profile
misses it, the page says so before the Install button; she renames it in her account) and the
team lead's (the build's page says which testers can't install it, with their devices; the
project's devices, the file for Apple's device upload, the App Store Connect key and "Register
all missing" against a stand-in for Apple, the mail per registered device).

With BUILDBAY_TEST_SCREENSHOTS set to a directory (docs/, to refresh them), the screens that
docs/ios-devices.md shows are written there, cropped to what they show."""

from __future__ import annotations

import os
import plistlib
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Locator, Page, expect

from tests.conftest import run_apart
from tests.console.conftest import PHONE
from tests.console.test_console import PASSWORD, sign_in
from tests.devices import IPHONE
from tests.ios.apple_receiver import AppleReceiver, apple_receiving, new_team_key
from tests.ios.console_devices import DAN_IPHONE, TESS_IPHONE, adhoc_ipa, enroll_at
from tests.ios.enrolling import signed_answer

pytestmark = pytest.mark.slow


@pytest.fixture
def receiver() -> Iterator[AppleReceiver]:
    """App Store Connect's stand-in (tests/ios/apple_receiver.py), on the wall clock."""
    with apple_receiving() as r:
        yield r


@pytest.fixture
def server_env(server_env: dict[str, str], receiver: AppleReceiver) -> dict[str, str]:
    return server_env | {"BUILDBAY_APPLE_API_URL": receiver.url}


NewPage = Callable[..., Page]
SHOTS = (
    Path(os.environ["BUILDBAY_TEST_SCREENSHOTS"])
    if "BUILDBAY_TEST_SCREENSHOTS" in os.environ
    else None
)


def shoot(page: Page, name: str, *parts: Locator, pad: int = 12) -> None:
    """A picture of the page around `parts` (one CSS pixel a pixel: small files)."""
    if SHOTS is None:
        return
    page.evaluate("window.scrollTo(0, 0)")
    boxes = [box for part in parts if (box := part.bounding_box()) is not None]
    left = max(min(b["x"] for b in boxes) - pad, 0)
    top = max(min(b["y"] for b in boxes) - pad, 0)
    right = max(b["x"] + b["width"] for b in boxes) + pad
    bottom = max(b["y"] + b["height"] for b in boxes) + pad
    clip = {"x": left, "y": top, "width": right - left, "height": bottom - top}
    page.screenshot(path=SHOTS / name, clip=clip, full_page=True, scale="css")


@dataclass
class Team:
    """Olga's project, its iOS application and Tess, a tester; an ad-hoc build for Dan's
    iPhone only, distributed to Tess."""

    project_id: str
    app_id: str
    build_id: str
    tess_id: str

    @property
    def build_path(self) -> str:
        return f"/projects/{self.project_id}/apps/{self.app_id}/builds/{self.build_id}"


def _account(http: httpx.Client, email: str, name: str) -> tuple[dict[str, str], str]:
    r = http.post("/api/auth/register", json={"email": email, "password": PASSWORD, "name": name})
    assert r.status_code == 201, r.text
    headers = {"Authorization": f"Bearer {r.json()['access_token']}"}
    return headers, str(http.get("/api/auth/me", headers=headers).json()["id"])


def _upload(http: httpx.Client, headers: dict[str, str], base: str, data: bytes) -> str:
    link = http.post(f"{base}/upload-link", json={"fileName": "Acme.ipa", "fileSize": len(data)},
                     headers=headers)  # fmt: skip
    assert link.status_code == 201, link.text
    body: dict[str, Any] = link.json()
    assert http.put(body["uploadUrl"], content=data, headers=body["uploadHeaders"]).is_success
    verify = {"buildId": body["buildId"], "notes": "The new checkout"}
    r = http.post(f"{base}/verify", json=verify, headers=headers)
    assert r.status_code == 200, r.text
    return str(body["buildId"])


@pytest.fixture
def team(server: str) -> Team:
    with httpx.Client(base_url=server, timeout=30) as http:
        olga, _ = _account(http, "olga@example.com", "Olga Lead")
        _, tess_id = _account(http, "tess@example.com", "Tess Tester")
        project = http.post("/api/projects", json={"name": "Acme"}, headers=olga).json()
        app = http.post(
            f"/api/projects/{project['id']}/applications",
            json={"name": "Acme iOS", "platform": "ios", "autoDistributeGroups": []},
            headers=olga,
        ).json()
        tess = {"email": "tess@example.com", "role": "tester"}
        r = http.post(f"/api/projects/{project['id']}/members", json=tess, headers=olga)
        assert r.status_code == 201, r.text
        base = f"/api/app-distribution/{project['id']}/{app['id']}/builds"
        build_id = _upload(http, olga, base, adhoc_ipa([DAN_IPHONE]))
        to_tess = {"emails": ["tess@example.com"], "notify": False}
        r = http.post(f"{base}/{build_id}/distribute", json=to_tess, headers=olga)
        assert r.status_code == 200, r.text
        return Team(project["id"], app["id"], build_id, tess_id)


def test_the_tester_registers_her_iphone_and_learns_the_build_is_not_for_it(
    server: str, new_page: NewPage, team: Team, database_url: str
) -> None:
    phone = new_page(server, **PHONE, user_agent=IPHONE)
    sign_in(phone, "tess@example.com")
    phone.goto(f"/projects/{team.project_id}/apps/{team.app_id}")
    phone.get_by_role("button", name="Install Acme.ipa").click()
    expect(phone).to_have_url(re.compile(r"/install/"))
    install_page = phone.url

    # No device of hers is enrolled: the page offers this one, before the Install button.
    register = phone.get_by_role("link", name="Register this device")
    expect(register).to_be_visible()
    token = install_page.rsplit("/install/", 1)[1]
    expect(register).to_have_attribute("href", f"/install/{token}/register-device")
    install = phone.get_by_role("button", name="Install", exact=True)
    assert register.bounding_box()["y"] < install.bounding_box()["y"]  # type: ignore[index]
    shoot(phone, "ios-devices-register.png", phone.locator("main > header"),
          phone.locator("#register-hint"))  # fmt: skip
    # The link hands the iPhone the profile that asks it for its UDID; the iPhone answers it,
    # signed with its device certificate (tests/ios/enrolling.py), and Safari opens the page
    # it is sent to.
    with phone.expect_download() as download:
        register.click()
    profile = plistlib.loads(Path(download.value.path()).read_bytes())
    assert profile["PayloadType"] == "Profile Service"
    service = profile["PayloadContent"]
    answer = signed_answer(service["Challenge"], UDID=TESS_IPHONE, PRODUCT="iPhone15,2",
                           DEVICE_NAME="Tess's iPhone")  # fmt: skip
    sent = httpx.post(service["URL"], content=answer, follow_redirects=False,
                      headers={"Content-Type": "application/pkcs7-signature"})  # fmt: skip
    assert sent.status_code == 301, sent.text
    phone.goto(sent.headers["location"])
    expect(phone.get_by_role("heading", level=1)).to_have_text("Tess's iPhone is registered")

    # Her iPhone enrolled, the build's profile still lists only Dan's: the install page says
    # so, and offers no registration any more.
    phone.goto(install_page)
    warning = phone.locator("#not-made-for")
    expect(warning).to_contain_text(
        f"This build was not made for your iPhone (UDID {TESS_IPHONE}). "
        "The developers have been told."
    )
    expect(register).to_have_count(0)
    assert warning.bounding_box()["y"] < install.bounding_box()["y"]  # type: ignore[index]
    # The page still fits the phone, the long UDID included.
    assert phone.evaluate("document.documentElement.scrollWidth") <= 390
    shoot(phone, "ios-devices-not-made-for.png", phone.locator("main > header"), install)

    # Her devices, in her account: renamed there (a form that redirects after its POST).
    phone.goto("/account")
    phone.get_by_role("link", name="Your devices").click()
    row = phone.locator("table.devices tbody tr")
    expect(row).to_have_count(1)
    expect(row).to_contain_text(TESS_IPHONE)
    expect(phone.get_by_role("link", name="Register this device")).to_be_visible()
    phone.get_by_label("Name of Tess's iPhone").fill("Tess's test iPhone")
    phone.get_by_role("button", name="Rename").click()
    expect(phone.get_by_role("status")).to_have_text("Renamed to “Tess's test iPhone”.")
    expect(phone).to_have_url(re.compile(r"/account/devices#device-dev_"))
    shoot(phone, "ios-devices-account.png", phone.locator("h1"), row)


def test_the_team_lead_sees_who_cannot_install_the_build(
    server: str, new_page: NewPage, team: Team, database_url: str, receiver: AppleReceiver
) -> None:
    run_apart(enroll_at(database_url, team.tess_id, TESS_IPHONE, "Tess's iPhone"))
    page = new_page(server)
    sign_in(page, "olga@example.com")

    page.goto(team.build_path)

    devices = page.locator("#devices")
    expect(devices.locator("#devices-summary")).to_contain_text(
        "1 tester can't install this build: its ad-hoc profile lists none of their devices."
    )
    row = devices.locator("table.devices-missing tbody tr")
    expect(row).to_have_count(1)
    expect(row.locator("td")).to_have_text(
        ["Tess Tester", "Tess's iPhone", "iPhone (iPhone15,2)", TESS_IPHONE]
    )
    shoot(page, "ios-devices-build.png", devices)

    # The project's devices: whether the newest ad-hoc build lists each, and Apple's file.
    page.get_by_role("link", name="Devices").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Devices")
    listed = page.locator("table.devices tbody tr")
    expect(listed).to_have_count(1)
    expect(listed.locator("td.in-profile")).to_have_text("missing")
    shoot(page, "ios-devices-project.png", page.locator("h1"), page.locator("#list"))
    with page.expect_download() as download:
        page.get_by_role("link", name="Export for Apple").click()
    assert download.value.suggested_filename == "acme-devices.txt"
    assert Path(download.value.path()).read_text().splitlines() == [
        "Device ID\tDevice Name\tDevice Platform",
        f"{TESS_IPHONE}\tTess's iPhone\tios",
    ]

    # Olga (the owner) saves the team's App Store Connect key and sends Apple the devices.
    key = receiver.trust(new_team_key())
    page.get_by_label("Key ID").fill(key.key_id)
    page.get_by_label("Issuer ID").fill(key.issuer_id)
    page.get_by_label("Private key").fill(key.pem)
    page.get_by_role("button", name="Save key").click()
    expect(page.get_by_role("status")).to_have_text(
        f"Key {key.key_id} saved. Devices can be registered with Apple from this page."
    )
    expect(page.locator("main")).not_to_contain_text("BEGIN PRIVATE KEY")
    page.get_by_role("button", name="Register all missing").click()
    expect(page.get_by_role("status")).to_have_text("1 device registered with Apple.")
    expect(listed.locator("td.apple")).to_contain_text("registered")
    assert receiver.udids == [TESS_IPHONE]
    assert all(not received.problems for received in receiver.received)
    shoot(page, "ios-devices-apple.png", page.locator("#apple"))

    # And a mail for each device a member registers from now on.
    page.get_by_label("Mail me when a member of Acme registers a device").check()
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_role("status")).to_contain_text("You will get a mail for each device")
    expect(page.get_by_label("Mail me when a member of Acme registers a device")).to_be_checked()

"""A tester on a phone, in a real browser: they see the ready builds distributed to them and
nothing else (no pending upload, no build given to others), with the one button that works on
their device: "Install" for an .ipa on an iPhone, a plain sentence for it on Android. Someone
invited only to test is not welcomed as if they came to start a project."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.console import phones
from tests.console.conftest import PHONE
from tests.console.test_console import sign_in
from tests.devices import ANDROID, IPHONE

pytestmark = pytest.mark.slow

NewPage = Callable[..., Page]


@dataclass
class Shelf:
    """An iOS application with three builds: one ready and distributed to Tess, one ready
    and given to nobody, one pending (its bytes never came)."""

    project_id: str
    app_id: str
    distributed: str
    undistributed: str
    pending: str
    tester_token: str
    owner_token: str

    @property
    def app_path(self) -> str:
        return f"/projects/{self.project_id}/apps/{self.app_id}"


@pytest.fixture
def shelf(server: str) -> Shelf:
    with httpx.Client(base_url=server, timeout=30) as http:
        acme = phones.acme(http, ("tess@example.com", "Tess"))
        distributed = acme.upload(http, "For Tess")
        undistributed = acme.upload(http, "Not for testers yet")
        pending = http.post(
            f"{acme.builds}/upload-link",
            json={"fileName": "Example.ipa", "fileSize": 1000},
            headers=acme.owner,
        )
        assert pending.status_code in (200, 201), pending.text
        acme.distribute(http, distributed, "tess@example.com", notify=False)
        return Shelf(
            acme.project_id,
            acme.app_id,
            distributed,
            undistributed,
            pending.json()["buildId"],
            acme.testers[0]["Authorization"],
            acme.owner["Authorization"],
        )


def test_a_tester_on_an_iphone_sees_only_their_ready_build_and_installs_it(
    server: str, new_page: NewPage, shelf: Shelf
) -> None:
    phone = new_page(server, **PHONE, user_agent=IPHONE)
    sign_in(phone, "tess@example.com")
    # Invited to test: their project, their role, and no "start a project" welcome.
    expect(phone.get_by_role("link", name="Acme")).to_be_visible()
    expect(phone.get_by_text("You test the builds of these projects")).to_be_visible()
    expect(phone.get_by_text("Welcome to Buildbay")).to_have_count(0)
    expect(phone.get_by_role("heading", name="New project")).to_have_count(0)
    expect(phone.get_by_role("button", name="Create project")).to_be_hidden()
    expect(phone.get_by_text("Start a project of your own")).to_be_visible()

    phone.get_by_role("link", name="Acme").click()
    phone.get_by_role("link", name="Acme iOS").click()
    rows = phone.locator("table.builds tbody tr")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("For Tess")
    expect(phone.locator(f"#build-{shelf.undistributed}")).to_have_count(0)
    expect(phone.locator(f"#build-{shelf.pending}")).to_have_count(0)
    expect(phone.get_by_role("link", name="Download")).to_have_count(0)
    # Nor do the release channels name the others (their counts, their newest build).
    expect(phone.locator("#channels")).not_to_contain_text("Ready builds")
    expect(phone.locator("main")).not_to_contain_text(shelf.undistributed)

    phone.get_by_role("button", name="Install Example.ipa").click()
    expect(phone).to_have_url(re.compile(r"/install/"))
    # This server is plain http, which iOS does not install from: the button is off, and the
    # page says why in words (the https:// server's button: tests/builds/test_install_links.py).
    install = phone.get_by_role("button", name="Install", exact=True)
    expect(install).to_be_disabled()
    expect(install).to_have_accessible_description(re.compile(r"Installing is turned off"))
    expect(phone.get_by_role("link", name="Install", exact=True)).to_have_count(0)
    # The page fits the phone: nothing wider than its screen (measured with its stylesheet).
    phone.wait_for_load_state("load")
    assert phone.evaluate("document.documentElement.scrollWidth") <= 390

    # The API lists the same one build to the tester, and refuses the others.
    with httpx.Client(base_url=server, timeout=30) as http:
        headers = {"Authorization": shelf.tester_token}
        base = f"/api/app-distribution/{shelf.project_id}/{shelf.app_id}/builds"
        listed = http.get(base, headers=headers)
        assert listed.status_code == 200, listed.text
        assert [b["buildId"] for b in listed.json()["builds"]] == [shelf.distributed]
        for hidden in (shelf.undistributed, shelf.pending):
            r = http.get(f"{base}/{hidden}", headers=headers)
            assert (r.status_code, r.json()["code"]) == (403, "not_distributed")


def test_an_ios_build_on_android_says_so_and_a_desktop_gets_the_download(
    server: str, new_page: NewPage, shelf: Shelf
) -> None:
    android = new_page(server, **PHONE, user_agent=ANDROID)
    sign_in(android, "tess@example.com")
    android.goto(shelf.app_path)
    row = android.locator(f"#build-{shelf.distributed}")
    expect(row).to_contain_text("For iPhone and iPad")
    expect(row.get_by_role("link", name="Download")).to_have_count(0)
    expect(row.get_by_role("button", name=re.compile("^Install"))).to_have_count(0)
    # Sharing is a developer's: a tester is offered no link to make.
    expect(row.get_by_role("button", name="Create install link")).to_have_count(0)
    # The install link a developer sent, opened on the Android phone: said plainly.
    with httpx.Client(base_url=server, timeout=30) as http:
        r = http.post(
            f"/api/app-distribution/{shelf.project_id}/{shelf.app_id}/builds/"
            f"{shelf.distributed}/install-link",
            headers={"Authorization": shelf.owner_token},
        )
        assert r.status_code == 201, r.text
    android.goto(r.json()["url"])
    expect(android.get_by_role("note")).to_contain_text(
        "This is an iOS build. It installs on an iPhone or iPad, not on this Android device."
    )
    expect(android.locator("a.install")).to_have_count(0)

    desktop = new_page(server)
    sign_in(desktop, "tess@example.com")
    desktop.goto(shelf.app_path)
    expect(desktop.locator("table.builds tbody tr")).to_have_count(1)
    expect(
        desktop.locator(f"#build-{shelf.distributed}").get_by_role("link", name="Download")
    ).to_be_visible()

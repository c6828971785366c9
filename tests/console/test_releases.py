"""The console's side of in-app updates, in a real browser: release channels, a build released
to some of them (at upload and later) and marked mandatory, and the update key copied and
rotated. Each step is checked against what an installed app's update check then answers."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest
from playwright.sync_api import Locator, Page, expect

from tests.builds.android_files import APK
from tests.console.conftest import add_unverified_member
from tests.console.test_console import NewPage, create_project_and_app, sign_up

pytestmark = pytest.mark.slow


def check(server: str, key: str, channel: str) -> dict[str, Any]:
    """What an installed build 1.0 (versionCode 1) of the app hears on `channel`."""
    r = httpx.get(
        f"{server}/api/updates/check",
        params={"key": key, "channel": channel, "versionCode": 1, "versionName": "1.0"},
    )
    assert r.status_code == 200, r.text
    answer: dict[str, Any] = r.json()
    return answer


def channel_row(page: Page, name: str) -> Locator:
    named = page.locator("code", has_text=re.compile(f"^{name}$"))
    return page.locator("#channels tbody tr", has=named)


def test_a_lead_releases_a_build_to_a_channel_marks_it_mandatory_and_rotates_the_key(
    server: str, new_page: NewPage
) -> None:
    page = new_page(server)
    sign_up(page, "lead@example.com", "Lea")
    create_project_and_app(page)

    expect(page).to_have_title("Acme Android · Buildbay")
    # Every application starts with `default`, which cannot be deleted.
    expect(channel_row(page, "default")).to_have_count(1)
    expect(channel_row(page, "default").get_by_role("button", name="Delete")).to_have_count(0)

    # A name that is not a channel name is refused with a sentence, and the field keeps it.
    page.get_by_label("New channel").fill("Beta Testers")
    page.get_by_role("button", name="Add channel").click()
    expect(page.locator("#e-channel-name")).to_contain_text("lowercase letters, digits")
    expect(page.get_by_label("New channel")).to_have_value("Beta Testers")
    page.get_by_label("New channel").fill("beta")
    page.get_by_role("button", name="Add channel").click()
    expect(channel_row(page, "beta")).to_have_count(1)
    page.get_by_label("New channel").fill("beta")
    page.get_by_role("button", name="Add channel").click()
    expect(page.locator("#e-channel-name")).to_contain_text("already has a channel named beta")

    key = page.locator("#update-key").inner_text()
    assert key.startswith("bbu_")
    expect(page.get_by_role("button", name="Copy update key")).to_be_visible()

    # Upload to beta only, as a mandatory update.
    form = page.locator("#upload-form")
    page.get_by_label("Build file").set_input_files(str(APK))
    form.get_by_label("default").uncheck()
    form.get_by_label("beta").check()
    form.get_by_label("Mandatory update").check()
    page.get_by_role("button", name="Upload").click()
    row = page.locator("table.builds tbody tr").first
    expect(row).to_contain_text("1.4.2 (42)")
    expect(row.locator(".tag")).to_have_text(["beta", "mandatory"])
    expect(channel_row(page, "beta")).to_contain_text("1.4.2 (42)")

    beta = check(server, key, "beta")
    assert (beta["updateAvailable"], beta["mandatory"]) == (True, True)
    assert beta["build"]["versionCode"] == 42
    assert check(server, key, "default")["updateAvailable"] is False

    # Later: released to default too, and no longer mandatory.
    row.get_by_text("Change").click()
    row.get_by_label("default").check()
    row.get_by_label("Mandatory update").uncheck()
    row.get_by_role("button", name="Save").click()
    row = page.locator("table.builds tbody tr").first
    expect(row.locator(".tag")).to_have_text(["beta", "default"])
    on_default = check(server, key, "default")
    assert (on_default["updateAvailable"], on_default["mandatory"]) == (True, False)

    # A new update key; the old one keeps answering (for 7 days).
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Rotate update key").click()
    expect(page.get_by_role("status")).to_contain_text("The update key changed")
    new_key = page.locator("#update-key").inner_text()
    assert new_key.startswith("bbu_")
    assert new_key != key
    assert check(server, new_key, "beta")["updateAvailable"] is True
    assert check(server, key, "beta")["updateAvailable"] is True

    # Deleting a channel keeps its builds.
    page.once("dialog", lambda dialog: dialog.accept())
    channel_row(page, "beta").get_by_role("button", name="Delete").click()
    expect(channel_row(page, "beta")).to_have_count(0)
    expect(page.locator("table.builds tbody tr").first.locator(".tag")).to_have_text(["default"])


def test_a_tester_sees_the_channels_but_neither_the_forms_nor_the_key(
    server: str, new_page: NewPage
) -> None:
    lead = new_page(server)
    sign_up(lead, "lead@example.com", "Lea")
    app_url = create_project_and_app(lead)
    project_url = app_url.rsplit("/apps/", 1)[0]
    lead.goto(project_url)
    tester = new_page(server)
    sign_up(tester, "tess@example.com", "Tess")
    add_unverified_member(lead, "tess@example.com")

    tester.goto(app_url)
    expect(channel_row(tester, "default")).to_have_count(1)
    expect(tester.get_by_label("New channel")).to_have_count(0)
    expect(tester.locator("#update-key")).to_have_count(0)
    expect(tester.get_by_text("Change")).to_have_count(0)

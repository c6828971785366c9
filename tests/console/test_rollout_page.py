"""A build's staged rollout in the console, in a real browser: the slider on the build page
per channel (with JavaScript and without), what update checks then answer, and the build's
history saying who changed it from what to what."""

from __future__ import annotations

import hashlib
import re
from typing import Any

import httpx
import pytest
from playwright.sync_api import Page, expect

from buildbay.updates.check import rollout_bucket
from tests.builds.android_files import APK
from tests.console.test_console import NewPage, create_project_and_app, sign_in, sign_up

pytestmark = pytest.mark.slow


def check(server: str, key: str, install_id: str | None) -> dict[str, Any]:
    """What an installed build of versionCode 1 hears on `default`."""
    params = {"key": key, "versionCode": 1} | ({"installId": install_id} if install_id else {})
    r = httpx.get(f"{server}/api/updates/check", params=params)
    assert r.status_code == 200, r.text
    answer: dict[str, Any] = r.json()
    return answer


def upload_and_open(page: Page) -> tuple[str, str, str]:
    """Upload the .apk from the application page and open its page: (update key, build id,
    build page's path)."""
    key = page.locator("#update-key").inner_text()
    page.get_by_label("Build file").set_input_files(str(APK))
    page.get_by_role("button", name="Upload").click()
    row = page.locator("table.builds tbody tr").first
    expect(row).to_contain_text("1.4.2 (42)")
    row.get_by_role("link").first.click()
    expect(page).to_have_url(re.compile(r"/builds/bld_"))
    build_id = page.url.rsplit("/builds/", 1)[1].split("#")[0].split("?")[0]
    return key, build_id, page.url.split("#")[0]


def installs(build_id: str, inside: bool, percent: int) -> str:
    """An install id whose bucket for the build is below `percent` (inside) or not."""
    for n in range(10_000):
        candidate = hashlib.sha256(f"install {n}".encode()).hexdigest()[:32]
        if (rollout_bucket(build_id, candidate) < percent) is inside:
            return candidate
    raise AssertionError("no such install id")


def test_a_lead_lowers_and_raises_a_builds_rollout_with_the_slider(
    server: str, new_page: NewPage
) -> None:
    page = new_page(server)
    sign_up(page, "lead@example.com", "Lea")
    create_project_and_app(page)
    key, build_id, _ = upload_and_open(page)
    assert check(server, key, None)["updateAvailable"] is True

    slider = page.get_by_label(re.compile("On default"))
    expect(slider).to_have_value("100")
    expect(page.locator("#rollout .rollout-shown")).to_have_text("100")
    expect(page.locator("#history")).to_contain_text("Nothing changed yet")

    slider.fill("30")
    expect(page.locator("#rollout .rollout-shown")).to_have_text("30")  # the number follows it
    page.get_by_role("button", name="Save rollout").click()
    expect(page.locator("p.notice")).to_contain_text(
        "Update checks on default now offer this build to 30% of its installs."
    )
    expect(page.get_by_label(re.compile("On default"))).to_have_value("30")
    row = page.locator("#history tbody tr")
    expect(row).to_have_count(1)
    expect(row.first).to_contain_text("Lowered the rollout on default from 100% to 30%")
    expect(row.first).to_contain_text("Lea")

    # Installs inside the 30% get it; the others, and apps that send no installId, do not.
    assert check(server, key, installs(build_id, True, 30))["build"]["buildId"] == build_id
    assert check(server, key, installs(build_id, False, 30))["updateAvailable"] is False
    assert check(server, key, None)["updateAvailable"] is False

    page.get_by_label(re.compile("On default")).fill("100")
    page.get_by_role("button", name="Save rollout").click()
    expect(page.locator("p.notice")).to_contain_text("now offer this build to every install")
    expect(page.locator("#history tbody tr").first).to_contain_text(
        "Raised the rollout on default from 30% to 100%"
    )
    assert check(server, key, None)["build"]["buildId"] == build_id


def test_the_slider_works_without_javascript_and_refuses_a_number_out_of_range(
    server: str, new_page: NewPage
) -> None:
    lead = new_page(server)
    sign_up(lead, "lead@example.com", "Lea")
    create_project_and_app(lead)
    key, build_id, build_page = upload_and_open(lead)

    page = new_page(server, java_script_enabled=False)
    sign_in(page, "lead@example.com")
    page.goto(build_page)
    page.get_by_label(re.compile("On default")).fill("45")
    page.get_by_role("button", name="Save rollout").click()
    expect(page).to_have_url(re.compile(r"/builds/bld_\w+#updates$"))  # redirected after POST
    expect(page.get_by_label(re.compile("On default"))).to_have_value("45")
    expect(page.locator("#rollout .rollout-shown")).to_have_text("45")
    expect(page.locator("#history tbody tr").first).to_contain_text("from 100% to 45%")
    assert check(server, key, installs(build_id, True, 45))["build"]["buildId"] == build_id

    # A number the slider cannot send (a hand-made form): a sentence beside it, nothing saved.
    slider = page.get_by_label(re.compile("On default"))
    slider.evaluate("e => { e.type = 'text'; e.value = '0'; }")
    page.get_by_role("button", name="Save rollout").click()
    expect(page.locator("#rollout .error")).to_have_text(
        "Choose a rollout from 1 to 100 percent of the channel's installs."
    )
    page.goto(build_page)
    expect(page.get_by_label(re.compile("On default"))).to_have_value("45")

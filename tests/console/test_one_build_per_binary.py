"""One build per binary in a real browser (issue 36), on a desktop and on a phone: the same file
uploaded twice is refused with a link to the build it already is; a build of another file with
the same version code is taken with a warning on both builds' pages; and the application's
settings make such builds refused instead."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from tests.builds.android_files import APK, APK_V1, expected
from tests.console.test_console import NewPage, create_project_and_app, sign_up
from tests.console.test_console_pages import PHONE, fits_the_screen, upload_demo

pytestmark = pytest.mark.slow

VERSION = f"{expected()['versionName']} ({expected()['versionCode']})"


def upload_refused(page: Page, file: str) -> None:
    """Upload `file` on the application page and wait for its refusal beside the field."""
    page.get_by_label("Build file").set_input_files(file)
    page.get_by_role("button", name="Upload").click()
    expect(page.locator("#e-file")).to_be_visible()


def builds_listed(page: Page) -> int:
    page.reload()
    expect(page.get_by_role("heading", level=1)).to_have_text("Acme Android")
    return page.locator("table.builds tbody tr").count()


@pytest.mark.parametrize("viewport", [None, PHONE], ids=["desktop", "phone"])
def test_the_same_file_twice_is_one_build_and_the_same_version_warns_on_the_build_page(
    server: str, new_page: NewPage, viewport: dict[str, int] | None
) -> None:
    page = new_page(server)
    if viewport:
        page.set_viewport_size(viewport)
    sign_up(page, "lead@example.com", "Lea")
    app_url = create_project_and_app(page)
    upload_demo(page, "First build")
    first_url = page.locator("table.builds").get_by_role("link", name=VERSION).get_attribute("href")
    assert first_url

    # The same file again: refused, with a link to the build it is; no second row.
    upload_refused(page, str(APK))
    refusal = page.locator("#e-file")
    expect(refusal).to_contain_text("This file was already uploaded as build")
    expect(refusal).to_contain_text(VERSION)
    expect(refusal.get_by_role("link", name="Open that build")).to_have_attribute("href", first_url)
    fits_the_screen(page)
    assert builds_listed(page) == 1

    # Another file of the same version code: taken, and its page says so.
    page.get_by_label("Build file").set_input_files(str(APK_V1))
    page.get_by_role("button", name="Upload").click()
    expect(page.locator("#upload-done")).to_contain_text("it is ready")
    page.locator("#upload-done").get_by_role("link", name="Open its page").click()
    warning = page.locator("#same-version")
    expect(warning).to_contain_text("Same version, other file.")
    expect(warning).to_contain_text(f"Version code {expected()['versionCode']} is also {VERSION}")
    expect(warning).to_contain_text("give each build its own version code")
    expect(warning).to_contain_text("An admin can make the application refuse such builds")
    fits_the_screen(page)
    second_url = re.sub(r"[?#].*", "", page.url)
    warning.get_by_role("link", name=VERSION).click()
    expect(page).to_have_url(re.compile(re.escape(first_url) + "$"))
    expect(page.locator("#same-version")).to_contain_text(VERSION)  # the first says it too
    page.locator("#same-version").get_by_role("link").click()
    expect(page).to_have_url(second_url)
    page.goto(app_url)
    assert builds_listed(page) == 2


def test_the_settings_make_a_repeated_version_code_refused(server: str, new_page: NewPage) -> None:
    page = new_page(server)
    sign_up(page, "lead@example.com", "Lea")
    app_url = create_project_and_app(page)
    upload_demo(page)

    page.get_by_role("link", name="Settings").click()
    warn = page.get_by_label("Take it, with a warning on its page and in the upload's answer")
    unique = page.get_by_label("Refuse it: each version code is one build")
    expect(warn).to_be_checked()
    unique.check()
    page.get_by_role("button", name="Save settings").click()
    expect(page.get_by_role("status")).to_have_text("Settings saved.")
    expect(unique).to_be_checked()
    page.reload()  # POST, then a redirect: a reload sends nothing again
    expect(page.get_by_label("Refuse it: each version code is one build")).to_be_checked()

    page.goto(app_url)
    upload_refused(page, str(APK_V1))
    refusal = page.locator("#e-file")
    expect(refusal).to_contain_text(f"Version code {expected()['versionCode']} is already build")
    expect(refusal).to_contain_text("raise the version code")
    expect(refusal.get_by_role("link", name="Open that build")).to_be_visible()
    refusal.get_by_role("link", name="Open that build").click()
    expect(page.get_by_role("heading", level=1)).to_contain_text(VERSION)
    expect(page.locator("#same-version")).to_have_count(0)  # the pending one is no build yet

    # Back to warnings: the same file of another version is taken again.
    page.goto(f"{app_url}/settings")
    page.get_by_label("Take it, with a warning on its page and in the upload's answer").check()
    page.get_by_role("button", name="Save settings").click()
    expect(page.get_by_role("status")).to_have_text("Settings saved.")
    page.goto(app_url)
    page.get_by_label("Build file").set_input_files(str(APK_V1))
    page.get_by_role("button", name="Upload").click()
    expect(page.locator("#upload-done")).to_contain_text("it is ready")

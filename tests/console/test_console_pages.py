"""A team lead's day one in a real browser, on a desktop and on a 390x844 phone: an application's
settings, a build's page (what the file says, notes, install links) and the builds list
(search, order), then a tester on her phone installing the build the lead gave her. Reloading
after any form never sends it again (POST/redirect/GET)."""

from __future__ import annotations

import re

import httpx
import pytest
from playwright.sync_api import Locator, Page, Request, expect

from tests.builds.android_files import APK, expected
from tests.console.conftest import PHONE as PHONE_CONTEXT
from tests.console.conftest import add_unverified_member
from tests.console.test_console import PASSWORD, NewPage, create_project_and_app, sign_in, sign_up
from tests.devices import ANDROID

pytestmark = pytest.mark.slow

PHONE = {"width": 390, "height": 844}


def posts_of(page: Page) -> list[str]:
    """The POSTs the page sends from now on."""
    sent: list[str] = []

    def on_request(request: Request) -> None:
        if request.method == "POST":
            sent.append(request.url)

    page.on("request", on_request)
    return sent


def reload_sends_nothing(page: Page, posts: list[str]) -> None:
    before = len(posts)
    page.reload()
    expect(page.locator("h1")).to_be_visible()
    assert len(posts) == before, posts[before:]


def fits_the_screen(page: Page) -> None:
    """Nothing wider than the viewport: no sideways scrolling on a phone. A failure names the
    elements that stick out."""
    # Measured once the stylesheet has arrived: a layout forced before it (the DOM can be ready
    # first, on a busy machine) is the browser's default one, a desktop table.
    page.wait_for_load_state("load")
    wide = page.evaluate(
        """() => [...document.querySelectorAll("body *")]
            .filter(e => e.getBoundingClientRect().right > window.innerWidth + 1)
            .map(e => `${e.tagName.toLowerCase()}.${e.className}#${e.id}`
                      + ` ${Math.round(e.getBoundingClientRect().right)}`)"""
    )
    scroll = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert (scroll, wide) == (0, []), (scroll, wide)


def upload_demo(page: Page, notes: str = "") -> None:
    page.get_by_label("Build file").set_input_files(str(APK))
    if notes:
        page.get_by_label("Release notes (optional)").fill(notes)
    page.get_by_role("button", name="Upload").click()
    expect(page.locator("table.builds tbody tr").first).to_contain_text("ready")


def at_both_widths(page: Page, *controls: Locator) -> None:
    """The page fits a desktop's width and a 390x844 phone's; at the phone's, each control the
    next steps use can be clicked there (Playwright's checks before a click, without the
    click: visible, stable, enabled, not covered by anything); then the desktop's width again.

    One walk through the forms then proves what a second walk at the phone's width did: the
    server never sees the width, and what the width changes, the layout, is checked here at
    every step where that walk checked it. The second walk (its sign-up, upload and tester's
    phone again) cost a quarter to a third of the module's CPU, Chromium's included."""
    fits_the_screen(page)
    desktop = page.viewport_size
    assert desktop is not None
    page.set_viewport_size(PHONE)
    try:
        fits_the_screen(page)
        for control in controls:
            control.click(trial=True)
    finally:
        page.set_viewport_size(desktop)


def test_a_lead_sets_retention_edits_notes_and_shares_then_revokes_a_link(
    server: str, new_page: NewPage
) -> None:
    page = new_page(server)
    posts = posts_of(page)
    sign_up(page, "lead@example.com", "Lea")
    app_url = create_project_and_app(page)
    tester = httpx.post(
        f"{server}/api/auth/register",
        json={"email": "tess@example.com", "password": PASSWORD, "name": "Tess"},
    )
    assert tester.status_code == 201, tester.text
    page.goto(app_url.split("/apps/")[0])
    at_both_widths(
        page, page.get_by_label("Add by e-mail"), page.get_by_role("button", name="Add member")
    )
    add_unverified_member(page, "tess@example.com")
    reload_sends_nothing(page, posts)
    page.goto(app_url)
    upload_demo(page, "First build")
    row = page.locator("table.builds tbody tr").first
    version = f"{expected()['versionName']} ({expected()['versionCode']})"
    expect(row).to_contain_text(version)
    expect(row.locator("img.icon")).to_be_visible()
    at_both_widths(page, page.get_by_role("link", name="Settings"))
    reload_sends_nothing(page, posts)

    # Settings: retention, refused first with a sentence beside the field.
    page.get_by_role("link", name="Settings").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Settings")
    at_both_widths(
        page,
        page.get_by_label("The newest (number of builds)"),
        page.get_by_role("button", name="Save settings"),
    )
    page.get_by_label("The newest (number of builds)").fill("0")
    page.get_by_role("button", name="Save settings").click()
    expect(page.locator("#e-keepLast")).to_have_text(
        "Enter a number of builds from 1 to 100,000, or leave it empty."
    )
    page.get_by_label("The newest (number of builds)").fill("5")
    page.get_by_role("button", name="Save settings").click()
    expect(page.get_by_role("status")).to_have_text("Settings saved.")
    expect(page.get_by_label("The newest (number of builds)")).to_have_value("5")
    reload_sends_nothing(page, posts)

    # The build's page: what the file says; the notes edited.
    page.goto(app_url)
    page.locator("table.builds").get_by_role("link", name=version).click()
    expect(page.get_by_role("heading", level=1)).to_contain_text(version)
    build_url = page.url
    facts = page.locator("dl.facts")
    expect(facts).to_contain_text(expected()["packageName"])
    expect(facts).to_contain_text(expected()["certificate"])
    expect(facts).to_contain_text("Lea <lead@example.com>")
    at_both_widths(
        page,
        page.get_by_label("Release notes"),
        page.get_by_role("button", name="Save notes"),
        page.get_by_label("New link works for"),
        page.get_by_role("button", name="Create install link"),
    )
    page.get_by_label("Release notes").fill("First build, with the login fix")
    page.get_by_role("button", name="Save notes").click()
    expect(page.get_by_role("status")).to_have_text("Notes saved.")
    expect(page.get_by_label("Release notes")).to_have_value("First build, with the login fix")
    reload_sends_nothing(page, posts)

    # An install link of 3 days, then revoked.
    page.get_by_label("New link works for").select_option(label="3 days")
    page.get_by_role("button", name="Create install link").click()
    fresh = page.locator("table.links tr.fresh")
    expect(fresh).to_contain_text("live")
    expect(fresh.get_by_role("button", name="Copy link")).to_be_visible()
    url = fresh.locator("a").get_attribute("href")
    assert url
    assert "/install/" in url
    at_both_widths(
        page,
        fresh.get_by_role("button", name="Copy link"),
        fresh.get_by_role("button", name="Revoke"),
    )
    reload_sends_nothing(page, posts)
    page.once("dialog", lambda dialog: dialog.accept())
    fresh.get_by_role("button", name="Revoke").click()
    expect(page.get_by_role("status")).to_contain_text("Install link revoked")
    expect(page.locator("table.links tbody tr").first).to_contain_text("revoked")
    reload_sends_nothing(page, posts)
    assert page.request.get(url).status == 410

    # The list shows the new notes; a search that finds nothing says so.
    page.goto(app_url)
    expect(page.locator("table.builds tbody tr").first).to_contain_text("with the login fix")
    page.get_by_label("Search builds").fill("no such build")
    page.get_by_role("button", name="Show").click()
    expect(page.get_by_text("No build matches")).to_be_visible()
    page.get_by_label("Search builds").fill(expected()["versionName"])
    page.get_by_label("Sort by").select_option("version")
    page.get_by_role("button", name="Show").click()
    expect(page).to_have_url(re.compile(r"sort=version"))
    expect(page.locator("table.builds tbody tr")).to_have_count(1)
    at_both_widths(
        page,
        page.get_by_label("Search builds"),
        page.get_by_label("Sort by"),
        page.get_by_role("button", name="Show"),
    )

    # The tester the lead added before uploading got the build (the application distributes
    # to everyone); on her Android phone she finds it and downloads the .apk to install.
    page.goto(build_url)
    expect(page.locator("main")).to_contain_text("tess@example.com")  # among who got it
    phone = new_page(server, **PHONE_CONTEXT, user_agent=ANDROID)
    sign_in(phone, "tess@example.com")
    phone.get_by_role("link", name="Acme", exact=True).click()
    phone.get_by_role("link", name="Acme Android").click()
    href = phone.get_by_role("link", name="Download").get_attribute("href")
    assert href
    assert phone.request.get(href).body() == APK.read_bytes()  # as her phone installs it


def test_an_application_is_deleted_only_with_its_name_typed_on_a_phone(
    server: str, new_page: NewPage
) -> None:
    page = new_page(server)
    page.set_viewport_size(PHONE)
    sign_up(page, "lead@example.com", "Lea")
    app_url = create_project_and_app(page)
    app_id = app_url.rstrip("/").rsplit("/", 1)[1]
    # CI is given the id, which outlives any rename.
    expect(page.locator("#ci-command")).to_have_text(f"buildbay upload FILE --app-id {app_id}")
    fits_the_screen(page)
    page.goto(f"{app_url}/settings")

    # The bundle id is cleared, the platform changed, the name changed: which CI jobs that
    # breaks is said.
    page.get_by_label("Name", exact=True).fill("Acme Beta")
    page.get_by_label("Bundle id").fill("com.acme.beta")
    page.get_by_role("button", name="Save settings").click()
    expect(page.get_by_role("status")).to_have_text(
        "Settings saved. Renamed from Acme Android to Acme Beta: CI jobs that name the "
        'application by name (buildbay upload --app "Acme Android") must change. Its id never '
        f"changes: name it by --app-id {app_id} instead."
    )
    fits_the_screen(page)
    page.get_by_label("Bundle id").fill("")
    page.get_by_label("Platform").select_option("ios")
    page.get_by_role("button", name="Save settings").click()
    expect(page.get_by_role("status")).to_have_text("Settings saved.")
    expect(page.get_by_label("Bundle id")).to_have_value("")
    expect(page.get_by_label("Platform")).to_have_value("ios")
    fits_the_screen(page)

    confirm = page.get_by_label("To delete it, type its name: Acme Beta")
    confirm.fill("Acme")
    page.get_by_role("button", name="Delete application").click()
    expect(page.locator("#e-confirm")).to_have_text(
        "Type the application's name exactly to delete it."
    )
    page.get_by_label("To delete it, type its name: Acme Beta").fill("Acme Beta")
    page.get_by_role("button", name="Delete application").click()
    expect(page.get_by_role("status")).to_have_text("Deleted Acme Beta and its builds.")
    expect(page.get_by_text("No applications yet.")).to_be_visible()
    assert page.request.get(app_url).status == 404


def test_every_page_of_a_lead_fits_a_phone(server: str, new_page: NewPage) -> None:
    page = new_page(server)
    page.set_viewport_size(PHONE)
    for path in ("/login", "/signup", "/forgot-password"):
        page.goto(path)
        fits_the_screen(page)
    sign_up(page, "lead@example.com", "Lea")
    fits_the_screen(page)
    app_url = create_project_and_app(page)
    upload_demo(page, "A build whose notes run long: " + "details " * 60)
    project_url = app_url.rsplit("/apps/", 1)[0]
    page.get_by_role("link", name="Details of demo.apk").click()
    build_url = page.url
    for path in (app_url, f"{app_url}/settings", build_url, project_url, f"{project_url}/groups",
                 f"{project_url}/webhooks", "/projects", "/account"):  # fmt: skip
        page.goto(path)
        expect(page.locator("h1")).to_be_visible()
        fits_the_screen(page)

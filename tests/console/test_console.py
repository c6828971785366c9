"""The web console in a real browser against a real server: sign up, a project and an
application, an upload from the browser, an API token used against the API and revoked, a
tester's view without destructive actions, and forms refused without their CSRF token."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, Route, expect

from tests.builds.android_files import APK, apk_of_size
from tests.console.conftest import add_unverified_member

pytestmark = pytest.mark.slow

NewPage = Callable[[str], Page]
PASSWORD = "a long password"


def sign_up(page: Page, email: str, name: str = "") -> None:
    page.goto("/signup")
    page.get_by_label("E-mail").fill(email)
    if name:
        page.get_by_label("Your name").fill(name)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Create account").click()
    expect(page).to_have_url(re.compile(r"/projects"))


def sign_in(page: Page, email: str) -> None:
    page.goto("/login")
    page.get_by_label("E-mail").fill(email)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(re.compile(r"/projects"))


def create_project_and_app(page: Page) -> str:
    """Returns the application page's path."""
    page.get_by_label("Project name").fill("Acme")
    page.get_by_role("button", name="Create project").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Acme")
    expect(page.get_by_text("No applications yet.")).to_be_visible()
    page.get_by_label("Application name").fill("Acme Android")
    page.get_by_label("Platform").select_option("android")
    page.get_by_role("button", name="Add application").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Acme Android")
    return page.url


def test_a_large_file_goes_in_parts_and_a_broken_part_is_sent_again(
    server: str, new_page: NewPage, tmp_path: Path
) -> None:
    page = new_page(server)
    sign_up(page, "grace@example.com", "Grace")
    create_project_and_app(page)
    # In parts from 5 MiB (the page says 64 MiB), so that a 20 MiB file has three parts.
    page.locator("#upload-form").evaluate("form => { form.dataset.partsFrom = 5242880; }")
    big = tmp_path / "big-release.apk"
    big.write_bytes(apk_of_size(20 * 1024 * 1024))  # an Android application takes an .apk
    sent: list[str] = []
    broken: list[str] = []

    def break_part_2_once(route: Route) -> None:
        part = re.search(r"[?&]part=(\d+)", route.request.url)
        assert part, route.request.url
        if part.group(1) == "2" and not broken:
            broken.append(part.group(1))
            route.abort("connectionreset")
            return
        sent.append(part.group(1))
        route.continue_()

    page.route("**/storage/parts/**", break_part_2_once)
    page.get_by_label("Build file").set_input_files(str(big))
    page.get_by_role("button", name="Upload").click()

    row = page.locator("table.builds tbody tr").first
    expect(row).to_contain_text("ready", timeout=30_000)  # a retry waits before it resends
    expect(row).to_contain_text("big-release.apk")
    assert broken == ["2"]
    assert sorted(sent) == ["1", "2", "3"]  # each part once through, part 2 again


def test_a_new_user_uploads_a_build_and_makes_a_token_for_ci(
    server: str, new_page: NewPage, tmp_path: Path
) -> None:
    page = new_page(server)
    sign_up(page, "ada@example.com", "Ada")
    expect(page.get_by_text("No projects yet.")).to_be_visible()
    app_url = create_project_and_app(page)
    expect(page.get_by_text("No builds yet.")).to_be_visible()

    # Upload from the browser, straight to the storage address, with a progress bar. The
    # network is slowed to 2 MiB/s so that the bar has time to move.
    big = tmp_path / "app-release.apk"
    big.write_bytes(bytes(6 * 1024 * 1024) + APK.read_bytes())  # a zip reads from its end
    slow = page.context.new_cdp_session(page)
    slow.send("Network.enable")
    slow.send("Network.emulateNetworkConditions", {
        "offline": False, "latency": 0, "downloadThroughput": -1,
        "uploadThroughput": 2 * 1024 * 1024,
    })  # fmt: skip
    page.get_by_label("Build file").set_input_files(str(big))
    page.get_by_label("Release notes (optional)").fill("First build from the browser")
    page.get_by_role("button", name="Upload").click()
    expect(page.locator("#upload-status")).to_have_text(re.compile(r"Uploading: [1-9]\d?%"))
    row = page.locator("table.builds tbody tr").first
    expect(row).to_contain_text("1.4.2 (42)")
    expect(row).to_contain_text("ready")
    expect(row).to_contain_text("First build from the browser")
    expect(row).to_contain_text("Ada")
    assert page.url.startswith(app_url)

    # An install link, to copy.
    row.get_by_role("button", name="Create install link").click()
    link = page.locator("tr.fresh a")
    expect(link).to_contain_text("/install/")
    install_url = link.get_attribute("href")
    assert install_url
    assert httpx.get(install_url, headers={"Accept": "text/html"}).status_code == 200
    expect(page.get_by_role("button", name="Copy install link")).to_be_visible()

    # An API token in account settings, shown once, used against the API, then revoked.
    page.get_by_role("link", name="Account").click()
    expect(page.get_by_text("No API tokens.")).to_be_visible()
    page.get_by_label("Token name").fill("github-actions")
    page.get_by_role("button", name="Create token").click()
    secret = page.locator("#new-token").inner_text()
    assert secret.startswith("bb_")
    api = httpx.get(f"{server}/api/projects", headers={"Authorization": f"Bearer {secret}"})
    assert api.status_code == 200
    assert [p["name"] for p in api.json()["projects"]] == ["Acme"]
    page.goto("/account")
    expect(page.locator("#new-token")).to_have_count(0)  # never shown again
    token_row = page.locator("tr", has_text="github-actions")
    expect(token_row.locator("td.last-used time")).to_have_count(1)  # its use was recorded
    page.once("dialog", lambda dialog: dialog.accept())
    token_row.get_by_role("button", name="Revoke").click()
    expect(page.get_by_text("No API tokens.")).to_be_visible()
    api = httpx.get(f"{server}/api/projects", headers={"Authorization": f"Bearer {secret}"})
    assert api.status_code == 401


def test_a_token_limited_to_a_scope_and_a_project_shows_them_and_keeps_to_them(
    server: str, new_page: NewPage
) -> None:
    page = new_page(server)
    sign_up(page, "ada@example.com", "Ada")
    for name in ("Acme", "Other"):
        page.goto("/projects")
        page.get_by_label("Project name").fill(name)
        page.get_by_role("button", name="Create project").click()
        expect(page.get_by_role("heading", level=1)).to_have_text(name)
    page.goto("/account")

    # "Only these" with none chosen: refused, with a sentence beside the projects.
    page.get_by_label("Token name").fill("uploader")
    page.get_by_label("Only these:").check()
    page.get_by_role("button", name="Create token").click()
    expect(page.get_by_role("alert")).to_have_text("Choose at least one project, or all of them.")
    expect(page.get_by_label("Token name")).to_have_value("uploader")  # what was typed stays

    page.get_by_role("radio", name=re.compile(r"Builds: read, upload")).check()
    page.get_by_label("Only these:").check()
    page.get_by_label("Acme", exact=True).check()
    page.get_by_role("button", name="Create token").click()
    secret = page.locator("#new-token").inner_text()
    row = page.locator("tr", has_text="uploader")
    expect(row.locator("td.scope")).to_have_text("builds:write")
    expect(row.locator("td.projects")).to_have_text("Acme")

    token = {"Authorization": f"Bearer {secret}"}
    api = httpx.get(f"{server}/api/projects", headers=token)
    assert [p["name"] for p in api.json()["projects"]] == ["Acme"]
    api = httpx.post(f"{server}/api/projects", json={"name": "Sneaky"}, headers=token)
    assert (api.status_code, api.json()["code"]) == (403, "token_not_allowed")
    api = httpx.get(f"{server}/api/account/api-tokens", headers=token)
    assert (api.status_code, api.json()["code"]) == (403, "interactive_session_required")

    # A token without limits says so.
    page.goto("/account")
    page.get_by_label("Token name").fill("everything")
    page.get_by_role("button", name="Create token").click()
    row = page.locator("tr", has_text="everything")
    expect(row.locator("td.scope")).to_have_text("everything")
    expect(row.locator("td.projects")).to_have_text("all")


def test_a_tester_sees_no_destructive_actions_and_the_server_refuses_them(
    server: str, new_page: NewPage
) -> None:
    owner = new_page(server)
    sign_up(owner, "owner@example.com", "Olga")
    app_url = create_project_and_app(owner)
    owner.get_by_label("Build file").set_input_files(str(APK))
    owner.get_by_role("button", name="Upload").click()
    expect(owner.locator("table.builds tbody tr").first).to_contain_text("ready")
    tester = new_page(server)
    sign_up(tester, "tess@example.com", "Tess")
    owner.get_by_role("link", name="Acme").first.click()
    add_unverified_member(owner, "tess@example.com")

    tester.goto(app_url)
    expect(tester.get_by_role("heading", level=1)).to_have_text("Acme Android")
    expect(tester.get_by_role("link", name="Download")).to_be_visible()
    expect(tester.get_by_role("button", name="Delete")).to_have_count(0)
    expect(tester.locator("#upload-form")).to_have_count(0)
    tester.get_by_role("link", name="Acme").first.click()
    expect(tester.get_by_role("button", name="Remove")).to_have_count(0)
    expect(tester.get_by_role("button", name="Delete project")).to_have_count(0)
    expect(tester.get_by_role("button", name="Add application")).to_have_count(0)

    # The server refuses anyway: a tester's own valid form post to delete the build.
    owner.goto(app_url)
    build_id = owner.locator("table.builds tbody tr").first.get_attribute("id")
    assert build_id
    csrf = tester.locator("input[name=csrf]").first.get_attribute("value")
    refused = tester.request.post(
        f"{app_url}/builds/{build_id.removeprefix('build-')}/delete",
        form={"csrf": csrf or ""},
        headers={"Origin": server},
    )
    assert refused.status == 403
    assert "developer role" in refused.text()


def test_forms_without_their_csrf_token_or_from_another_site_are_refused(
    server: str, new_page: NewPage
) -> None:
    page = new_page(server)
    sign_up(page, "ada@example.com")
    csrf = page.locator("input[name=csrf]").first.get_attribute("value") or ""

    no_token = page.request.post(f"{server}/projects", form={"name": "Sneaky"})
    assert no_token.status == 403
    assert "security token" in no_token.text()
    elsewhere = page.request.post(
        f"{server}/projects", form={"name": "Sneaky", "csrf": csrf},
        headers={"Origin": "https://evil.example"},
    )  # fmt: skip
    assert elsewhere.status == 403
    page.goto("/projects")
    expect(page.get_by_text("No projects yet.")).to_be_visible()
    made = page.request.post(
        f"{server}/projects", form={"name": "Fine", "csrf": csrf}, headers={"Origin": server}
    )
    assert made.ok


def test_errors_show_beside_their_field_and_logout_ends_the_session(
    server: str, new_page: NewPage
) -> None:
    page = new_page(server)
    page.goto("/signup")
    page.get_by_label("E-mail").fill("not-an-email")
    page.get_by_label("Password").fill("short")
    page.get_by_role("button", name="Create account").click()
    expect(page.locator("#e-email")).to_be_visible()
    expect(page.locator("#e-password")).to_contain_text("8")
    expect(page.get_by_label("Password")).to_have_attribute("aria-invalid", "true")

    sign_up(page, "ada@example.com")
    cookie = next(c for c in page.context.cookies() if c["name"] == "bb_session")
    assert cookie["httpOnly"]
    assert cookie["sameSite"] == "Lax"
    # Plain HTTP here (no https PUBLIC_URL): a Secure cookie would be dropped off localhost.
    assert not cookie["secure"]
    assert cookie["sameSite"] == "Lax"
    page.get_by_role("button", name="Sign out").click()
    expect(page).to_have_url(re.compile(r"/login"))
    # The old cookie no longer opens anything: the session was revoked on the server.
    stale = httpx.get(
        f"{server}/projects", cookies={"bb_session": cookie["value"]}, follow_redirects=False
    )
    assert stale.status_code == 303
    assert stale.headers["location"].startswith("/login")
    sign_in(page, "ada@example.com")


def test_an_owner_manages_members_and_the_project(server: str, new_page: NewPage) -> None:
    page = new_page(server)
    sign_up(page, "owner@example.com", "Olga")
    create_project_and_app(page)
    page.get_by_role("link", name="Acme").first.click()
    # Errors beside the field: no such account, then the member twice.
    page.get_by_label("Add by e-mail").fill("nobody@example.com")
    page.get_by_role("button", name="Add member").click()
    expect(page.locator("#e-email")).to_contain_text("No Buildbay account has this e-mail yet")
    expect(page.get_by_label("Add by e-mail")).to_be_focused()
    expect(page.get_by_role("button", name="Invite nobody@example.com as a tester")).to_be_visible()
    helper = new_page(server)
    sign_up(helper, "dev@example.com", "Dev")
    add_unverified_member(page, "dev@example.com")
    page.get_by_label("Add by e-mail").fill("dev@example.com")
    page.get_by_role("button", name="Add member").click()
    expect(page.locator("#members")).to_contain_text("already a member")
    # Change the role, then remove.
    page.get_by_label("Role of dev@example.com").select_option("developer")
    page.locator("tr", has_text="dev@example.com").get_by_role("button", name="Change").click()
    expect(page.get_by_label("Role of dev@example.com")).to_have_value("developer")
    page.once("dialog", lambda dialog: dialog.accept())
    page.locator("tr", has_text="dev@example.com").get_by_role("button", name="Remove").click()
    expect(page.locator("#members")).not_to_contain_text("dev@example.com")
    # Rename, then delete only with the name typed.
    page.get_by_label("Rename project").fill("Acme Mobile")
    page.get_by_role("button", name="Rename").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Acme Mobile")
    page.get_by_label(re.compile("To delete this project")).fill("wrong name")
    page.get_by_role("button", name="Delete project").click()
    expect(page.locator("#e-confirm")).to_be_visible()
    page.get_by_label(re.compile("To delete this project")).fill("Acme Mobile")
    page.get_by_role("button", name="Delete project").click()
    expect(page.get_by_text("No projects yet.")).to_be_visible()


def test_a_token_from_before_sign_in_is_refused_after(server: str, new_page: NewPage) -> None:
    """The CSRF token is bound to the session: one taken while signed out (as an attacker who
    planted their own nonce could get) does not pass once the visitor is signed in."""
    page = new_page(server)
    page.goto("/login")
    anonymous = page.locator("input[name=csrf]").first.get_attribute("value") or ""
    sign_up(page, "ada@example.com")
    refused = page.request.post(
        f"{server}/projects", form={"name": "Sneaky", "csrf": anonymous},
        headers={"Origin": server},
    )  # fmt: skip
    assert refused.status == 403

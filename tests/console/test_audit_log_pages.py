"""The audit log in the console, in a real browser (issue 41): the admin finds it from the
project's page, reads what happened as sentences, filters it (a GET form), pages to older
entries, and downloads the export; the account's own log shows a failed sign-in as typed."""

from __future__ import annotations

import json
import re
from collections.abc import Callable

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.console.conftest import add_unverified_member
from tests.console.test_console import PASSWORD, sign_up

pytestmark = pytest.mark.slow

NewPage = Callable[[str], Page]


def test_an_admin_reads_filters_pages_and_exports_the_audit_log(
    server: str, new_page: NewPage
) -> None:
    r = httpx.post(
        f"{server}/api/auth/register", json={"email": "bob@example.com", "password": PASSWORD}
    )
    assert r.status_code == 201, r.text
    page = new_page(server)
    sign_up(page, "lena@example.com", "Lena")
    page.get_by_label("Project name").fill("Acme")
    page.get_by_role("button", name="Create project").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Acme")
    project_url = page.url
    add_unverified_member(page, "bob@example.com")
    page.get_by_label("Role of bob@example.com").select_option("admin")
    page.locator("#members").get_by_role("button", name="Change").click()
    expect(page.get_by_label("Role of bob@example.com")).to_have_value("admin")

    # Someone tries Lena's account with a wrong password.
    stranger = new_page(server)
    stranger.goto("/login")
    stranger.get_by_label("E-mail").fill("LENA@example.com")
    stranger.get_by_label("Password").fill("not her password")
    stranger.get_by_role("button", name="Sign in").click()
    expect(stranger.get_by_role("alert")).to_be_visible()

    # Enough renames (through the API, with Lena's login) for a second page.
    login = httpx.post(
        f"{server}/api/auth/login", json={"email": "lena@example.com", "password": PASSWORD}
    )
    headers = {"Authorization": f"Bearer {login.json()['access_token']}"}
    project_id = project_url.rstrip("/").rsplit("/", 1)[1]
    for n in range(50):
        r = httpx.put(f"{server}/api/projects/{project_id}", json={"name": f"Acme {n}"},
                      headers=headers)  # fmt: skip
        assert r.status_code == 200, r.text

    page.goto(project_url)
    page.get_by_role("link", name="Open the audit log").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Audit log")
    rows = page.locator("table.audit-log tbody tr")
    expect(rows).to_have_count(50)
    expect(rows.first).to_contain_text(
        "lena@example.com renamed the project from Acme 48 to Acme 49"
    )
    page.get_by_role("link", name="Older entries").click()
    expect(rows).to_have_count(3)  # the role, the member, the creation
    expect(page.locator("table.audit-log")).to_contain_text(
        "lena@example.com changed bob@example.com's role from tester to admin"
    )
    expect(page.locator("table.audit-log")).to_contain_text(
        "lena@example.com added bob@example.com as tester"
    )
    expect(page.get_by_role("link", name="Older entries")).to_have_count(0)

    # Filters: the form's GET is the address.
    page.get_by_label("Action").select_option(label="Role changed")
    page.get_by_role("button", name="Filter").click()
    expect(page).to_have_url(re.compile(r"action=member\.role_changed"))
    expect(rows).to_have_count(1)
    page.get_by_label("By (e-mail)").fill("bob@example.com")
    page.get_by_role("button", name="Filter").click()
    expect(page.get_by_text("No entries match these filters.")).to_be_visible()
    page.get_by_role("link", name="Clear filters").click()
    page.get_by_label("From").fill("2000-01-02")
    page.get_by_label("To (inclusive)").fill("2000-01-01")
    page.get_by_role("button", name="Filter").click()
    expect(page.get_by_text("No entries match these filters.")).to_be_visible()

    # The export: the filtered log, one JSON entry a line, as a download.
    page.get_by_role("link", name="Clear filters").click()
    page.get_by_label("Action").select_option(label="Role changed")
    page.get_by_role("button", name="Filter").click()
    with page.expect_download() as download:
        page.get_by_role("link", name="Export (NDJSON)").click()
    saved = download.value
    assert saved.suggested_filename == f"audit-log-{project_id}.ndjson"
    lines = [json.loads(line) for line in saved.path().read_text().splitlines()]
    assert [(e["action"], e["target"]["name"], e["details"]) for e in lines] == [
        ("member.role_changed", "bob@example.com", {"from": "tester", "to": "admin"})
    ]

    # The account's own log: the failed sign-in, as it was typed.
    page.get_by_role("link", name="Account").click()
    page.get_by_role("link", name="Open your audit log").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Your account's audit log")
    expect(page.locator("table.audit-log tbody tr")).to_have_count(50)  # her renames, first
    page.get_by_label("Action").select_option(label="Failed sign-in")
    page.get_by_role("button", name="Filter").click()
    expect(page.locator("table.audit-log tbody tr")).to_have_count(1)
    expect(page.locator("table.audit-log")).to_contain_text(
        "LENA@example.com failed to sign in (wrong e-mail or password)"
    )

    # Bob, an admin now, reads the project's log too (it is the project's, for every admin).
    bob = new_page(server)
    bob.goto("/login")
    bob.get_by_label("E-mail").fill("bob@example.com")
    bob.get_by_label("Password").fill(PASSWORD)
    bob.get_by_role("button", name="Sign in").click()
    bob.goto(f"/projects/{project_id}/audit-log?action=member.added")
    expect(bob.locator("table.audit-log tbody tr")).to_have_count(1)

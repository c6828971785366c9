"""The console in a real browser, for what only a browser shows: times in the reader's own time
zone (and in UTC, said so, without JavaScript), and a build's long notes kept to two lines in
the list, with the rest on the build's page."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.builds.android_files import APK
from tests.console.test_console import PASSWORD, create_project_and_app, sign_in, sign_up

pytestmark = pytest.mark.slow

NewPage = Callable[..., Page]
# Half an hour off UTC: no local time there reads as the UTC one.
ZONE = "Asia/Kolkata"


def _created(page: Page) -> tuple[datetime, str, str]:
    """The projects table's first "Created" time: its moment, text and title."""
    cell = page.locator('td[data-label="Created"] time').first
    expect(cell).to_have_attribute("datetime", re.compile(r"Z$"))
    moment = datetime.fromisoformat(str(cell.get_attribute("datetime")))
    return moment, cell.inner_text(), str(cell.get_attribute("title") or "")


def test_times_read_in_the_browsers_time_zone_and_in_utc_without_script(
    server: str, new_page: NewPage
) -> None:
    page = new_page(server, timezone_id=ZONE, locale="en-GB")
    sign_up(page, "lead@example.com", "Lea")
    create_project_and_app(page)
    page.goto("/projects")

    moment, shown, title = _created(page)
    local = moment.astimezone(ZoneInfo(ZONE))
    assert local.strftime("%H:%M") in shown, shown
    assert moment.strftime("%H:%M") not in shown
    assert "UTC" not in shown
    assert f"{local.day} {local:%b} {local.year}" in shown
    assert title == f"{moment:%d %b %Y, %H:%M} UTC"  # the server's writing, kept on hover

    # Without JavaScript the page reads in UTC, and says so.
    bare = new_page(server, timezone_id=ZONE, java_script_enabled=False)
    sign_in(bare, "lead@example.com")
    bare.goto("/projects")
    moment_bare, shown_bare, _ = _created(bare)
    assert moment_bare == moment
    assert shown_bare == f"{moment:%d %b %Y, %H:%M} UTC"


def _upload_apk(server: str, app_url: str, notes: str) -> tuple[str, str]:
    """A ready build with `notes` of the lead's application (at `app_url`): its application
    page's path and the build's id."""
    project_id, app_id = re.findall(r"/(?:projects|apps)/([^/]+)", app_url)
    with httpx.Client(base_url=server, timeout=30) as http:
        login = http.post("/api/auth/login", json={"email": "lead@example.com",
                                                   "password": PASSWORD})  # fmt: skip
        assert login.status_code == 200, login.text
        headers = {"Authorization": f"Bearer {login.json()['access_token']}"}
        base = f"/api/app-distribution/{project_id}/{app_id}/builds"
        data = APK.read_bytes()
        link = http.post(
            f"{base}/upload-link", json={"fileName": "demo.apk", "fileSize": len(data)},
            headers=headers,
        )  # fmt: skip
        assert link.status_code in (200, 201), link.text
        body: dict[str, Any] = link.json()
        assert http.put(body["uploadUrl"], content=data, headers=body["uploadHeaders"]).is_success
        r = http.post(f"{base}/verify", json={"buildId": body["buildId"], "notes": notes},
                      headers=headers)  # fmt: skip
        assert r.status_code == 200, r.text
        return f"/projects/{project_id}/apps/{app_id}", str(body["buildId"])


def test_a_builds_long_notes_take_two_lines_in_the_list_and_all_on_its_page(
    server: str, new_page: NewPage
) -> None:
    page = new_page(server)
    sign_up(page, "lead@example.com", "Lea")
    app_url = create_project_and_app(page)
    notes = "Release 2.0\n" + "\n".join(f"- fixed thing number {n}" for n in range(1, 30))
    app_path, build_id = _upload_apk(server, app_url, notes)

    page.goto(app_path)
    shown = page.locator(f"#build-{build_id} td.notes p.clamp")
    expect(shown).to_contain_text("Release 2.0")
    box = shown.evaluate(
        "(p) => ({height: p.clientHeight, full: p.scrollHeight,"
        " line: parseFloat(getComputedStyle(p).lineHeight)})"
    )
    assert box["height"] <= 2 * box["line"] + 1, box  # two lines of it
    assert box["full"] > 10 * box["line"], box  # the rest is there, hidden
    row = page.locator(f"#build-{build_id}")
    assert row.bounding_box()["height"] < 8 * box["line"]  # type: ignore[index]

    row.get_by_role("link", name=re.compile("^All notes")).click()
    expect(page).to_have_url(re.compile(rf"/builds/{build_id}#notes$"))
    expect(page.get_by_label("Release notes")).to_have_value(notes)

"""The browser upload in a real browser: a file dropped on the form, speed and time left while
it goes, a warning before leaving mid-upload, Cancel, and at the end a link to the new build's
page. Every failure (the first request, a part, verify refused) ends in a sentence beside the
file and an enabled Upload button, never in "Starting…" or "Checking the upload…"."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Dialog, Page, Route, expect

from tests.builds.android_files import APK, apk_of_size
from tests.console.conftest import PHONE
from tests.console.test_console import PASSWORD, create_project_and_app, sign_up

pytestmark = pytest.mark.slow

NewPage = Callable[..., Page]


def _slow_network(page: Page, bytes_per_second: int) -> None:
    cdp = page.context.new_cdp_session(page)
    cdp.send("Network.enable")
    cdp.send("Network.emulateNetworkConditions", {
        "offline": False, "latency": 0, "downloadThroughput": -1,
        "uploadThroughput": bytes_per_second,
    })  # fmt: skip


def _drop(page: Page, path: Path) -> None:
    """Drops the file on the upload form, as a person dragging it from their desktop would."""
    data = page.evaluate_handle(
        """([name, encoded]) => {
            const bytes = Uint8Array.from(atob(encoded), (c) => c.charCodeAt(0));
            const transfer = new DataTransfer();
            transfer.items.add(new File([bytes], name));
            return transfer;
        }""",
        [path.name, base64.b64encode(path.read_bytes()).decode()],
    )
    page.dispatch_event("#upload-form", "dragover", {"dataTransfer": data})
    expect(page.locator("#upload-form")).to_have_class(re.compile("dropping"))
    page.dispatch_event("#upload-form", "drop", {"dataTransfer": data})


def _upload_button(page: Page) -> object:
    return page.get_by_role("button", name="Upload", exact=True)


def _builds_of(
    server: str, email: str, app_url: str, status: str | None = None
) -> list[dict[str, object]]:
    project_id, app_id = re.findall(r"/(?:projects|apps)/([^/]+)", app_url)
    with httpx.Client(base_url=server, timeout=30) as http:
        login = http.post("/api/auth/login", json={"email": email, "password": PASSWORD})
        r = http.get(
            f"/api/app-distribution/{project_id}/{app_id}/builds",
            params={"status": status} if status else {},
            headers={"Authorization": f"Bearer {login.json()['access_token']}"},
        )
        assert r.status_code == 200, r.text
        builds: list[dict[str, object]] = r.json()["builds"]
        return builds


def test_a_dropped_build_shows_speed_and_time_left_and_ends_with_a_link_to_its_page(
    server: str, new_page: NewPage, tmp_path: Path
) -> None:
    page = new_page(server)
    sign_up(page, "ada@example.com", "Ada")
    app_url = create_project_and_app(page)
    big = tmp_path / "app-release.apk"
    big.write_bytes(bytes(6 * 1024 * 1024) + APK.read_bytes())  # a zip reads from its end
    _drop(page, big)
    expect(page.locator("#upload-chosen")).to_have_text(
        re.compile(r"^app-release\.apk, 6(\.\d)? MiB$")
    )

    _slow_network(page, 1024 * 1024)
    _upload_button(page).click()
    status = page.locator("#upload-status")
    size, speed = r"[\d.]+ (KiB|MiB)", r"[\d.]+ (KiB|MiB)/s"
    expect(status).to_have_text(
        re.compile(rf"^Uploading: \d+% · {size} of 6(\.\d)? MiB · {speed} · about \d+ s left$")
    )
    expect(_upload_button(page)).to_be_disabled()
    expect(page.get_by_role("button", name="Cancel upload")).to_be_visible()

    # Leaving mid-upload: the browser asks first; staying keeps the upload going.
    asked: list[str] = []

    def stay(dialog: Dialog) -> None:
        asked.append(dialog.type)
        dialog.dismiss()

    page.once("dialog", stay)
    page.close(run_before_unload=True)
    expect(status).to_have_text(re.compile(r"Uploading"))
    assert asked == ["beforeunload"]

    done = page.locator("#upload-done")
    expect(done).to_contain_text("Uploaded app-release.apk (6 MiB)", timeout=30_000)
    expect(done).to_contain_text("it is ready.")
    [build] = _builds_of(server, "ada@example.com", app_url)
    link = done.get_by_role("link", name="Open its page")
    expect(link).to_have_attribute("href", re.compile(f"/builds/{build['buildId']}$"))
    expect(page.locator(f"#build-{build['buildId']}")).to_contain_text("ready")
    assert "bytes" not in (done.text_content() or "")
    link.click()
    expect(page).to_have_url(re.compile(f"/builds/{build['buildId']}$"))


def test_cancel_on_a_phone_stops_the_upload_and_keeps_nothing(
    server: str, new_page: NewPage, tmp_path: Path
) -> None:
    page = new_page(server, **PHONE)
    sign_up(page, "ada@example.com", "Ada")
    app_url = create_project_and_app(page)
    big = tmp_path / "app-release.apk"
    big.write_bytes(bytes(8 * 1024 * 1024) + APK.read_bytes())
    page.get_by_label("Build file").set_input_files(str(big))
    _slow_network(page, 512 * 1024)
    _upload_button(page).click()
    expect(page.locator("#upload-status")).to_have_text(re.compile(r"Uploading: \d+%"))
    with page.expect_request(re.compile(r"/builds/[^/]+/delete$")) as deleted:
        page.get_by_role("button", name="Cancel upload").click()
    assert deleted.value.method == "POST"
    expect(page.locator("#e-file")).to_have_text("Upload cancelled: nothing was kept.")
    expect(_upload_button(page)).to_be_enabled()
    expect(page.get_by_role("button", name="Cancel upload")).to_be_hidden()
    expect(page.locator("#upload-progress")).to_be_hidden()
    # The pending build was deleted, not left for the sweeper.
    assert _builds_of(server, "ada@example.com", app_url) == []
    page.reload()
    expect(page.get_by_text("No builds yet.")).to_be_visible()


def test_every_failure_ends_in_a_sentence_and_an_enabled_button(
    server: str, new_page: NewPage, tmp_path: Path
) -> None:
    page = new_page(server)
    sign_up(page, "ada@example.com", "Ada")
    app_url = create_project_and_app(page)
    error = page.locator("#e-file")
    page.get_by_label("Build file").set_input_files(str(APK))

    def refused_with(message: str) -> None:
        expect(error).to_have_text(message)
        expect(_upload_button(page)).to_be_enabled()
        expect(page.locator("#upload-progress")).to_be_hidden()
        expect(page.locator("#upload-status")).not_to_have_text(re.compile("Starting|Checking"))

    # The first request cannot reach the server, then the server answers with an error page.
    page.route("**/uploads", lambda route: route.abort("connectionrefused"))
    _upload_button(page).click()
    refused_with("Buildbay could not be reached; check the connection and press Upload again.")
    page.unroute("**/uploads")
    page.route("**/uploads", lambda route: route.fulfill(status=502, body="Bad gateway"))
    _upload_button(page).click()
    refused_with("Buildbay could not take the upload just now; press Upload again in a moment.")
    page.unroute("**/uploads")

    # The bytes' connection breaks.
    page.route("**/storage/**", lambda route: route.abort("connectionreset"))
    _upload_button(page).click()
    refused_with("The connection broke during the upload; press Upload again.")
    page.unroute("**/storage/**")

    # Verify refuses the file, as a problem with a detail.
    problem = {
        "type": "/problems/unreadable-build", "status": 422, "code": "unreadable_build",
        "detail": "This file is not an Android build: it has no AndroidManifest.xml",
    }  # fmt: skip

    def refuse(route: Route) -> None:
        route.fulfill(status=422, content_type="application/problem+json", body=json.dumps(problem))

    page.route("**/verify", refuse)
    _upload_button(page).click()
    refused_with("This file is not an Android build: it has no AndroidManifest.xml.")
    page.unroute("**/verify")

    # The server's own refusals: a file of no Android kind (at the first request), and an .apk
    # that cannot be read (at verify).
    notes = tmp_path / "notes.txt"
    notes.write_text("Not a build")
    page.get_by_label("Build file").set_input_files(str(notes))
    _upload_button(page).click()
    refused_with(
        'This is an Android application: it takes .apk or .aab files, and "notes.txt" is not one.'
    )
    broken = tmp_path / "broken.apk"
    broken.write_bytes(b"PK\x03\x04 not a zip after all")
    page.get_by_label("Build file").set_input_files(str(broken))
    _upload_button(page).click()
    expect(error).to_contain_text(
        "an Android application takes only builds whose metadata can be read."
    )
    refused_with(error.text_content() or "")
    page.get_by_label("Build file").set_input_files(str(APK))

    # Nothing was stuck: the same button uploads the file now.
    _upload_button(page).click()
    expect(page.locator("#upload-done")).to_contain_text("Uploaded demo.apk", timeout=30_000)
    # The upload whose connection broke left nothing, nor did the file refused at the first
    # request; the two verify refused stay pending until the sweeper's next round (with their
    # reason, for a developer who asks for them), but no list shows them by default.
    [ready] = _builds_of(server, "ada@example.com", app_url)
    assert ready["status"] == "ready"
    refused = _builds_of(server, "ada@example.com", app_url, status="pending")
    assert len(refused) == 2
    assert "broken.apk" in {b["fileName"] for b in refused}
    page.reload()
    rows = page.locator("table.builds tbody tr")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("ready")
    expect(page.locator("table.builds")).not_to_contain_text("pending")


def test_a_part_that_keeps_failing_says_so_and_upload_again_sends_the_rest(
    server: str, new_page: NewPage, tmp_path: Path
) -> None:
    page = new_page(server, **PHONE)
    sign_up(page, "grace@example.com", "Grace")
    create_project_and_app(page)
    # In parts from 5 MiB (the page says 64 MiB), so that a 20 MiB file has three parts.
    page.locator("#upload-form").evaluate("form => { form.dataset.partsFrom = 5242880; }")
    big = tmp_path / "big-release.apk"
    big.write_bytes(apk_of_size(20 * 1024 * 1024))  # an Android application takes an .apk

    def break_part_2(route: Route) -> None:
        if re.search(r"[?&]part=2\b", route.request.url):
            route.abort("connectionreset")
        else:
            route.continue_()

    page.route("**/storage/parts/**", break_part_2)
    page.get_by_label("Build file").set_input_files(str(big))
    _upload_button(page).click()
    expect(page.locator("#e-file")).to_have_text(
        "The connection keeps breaking; press Upload again to send the rest.", timeout=30_000
    )
    expect(_upload_button(page)).to_be_enabled()
    expect(page.locator("#upload-progress")).to_be_hidden()

    page.unroute("**/storage/parts/**")
    sent: list[str] = []
    page.route(
        "**/storage/parts/**", lambda route: (sent.append(route.request.url), route.continue_())
    )
    _upload_button(page).click()
    expect(page.locator("#upload-done")).to_contain_text(
        "Uploaded big-release.apk (20 MiB)", timeout=30_000
    )
    assert len(sent) == 1
    assert re.search(r"[?&]part=2\b", sent[0])

"""The team's feedback inbox in a real browser (issue 38), against a real server mailing a real
SMTP server: testers send feedback through the API with real PNG screenshots; a developer finds
it from the project's page, with thumbnails served by their signed addresses under the page's
Content-Security-Policy, narrows it with the filters and the status chips, moves through it
with j and k, triages one and replies (the tester gets the mail). Each build's row and page
count its new feedback; a tester is refused the inbox; what testers typed shows as text."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.builds.android_files import aab, proto_manifest
from tests.console.test_console import PASSWORD, sign_in
from tests.feedback.submitting import form_parts, png, screenshots
from tests.smtp import Received, SmtpSink, smtp

__all__ = ["smtp"]
pytestmark = pytest.mark.slow

NewPage = Callable[..., Page]


@pytest.fixture
def server_env(server_env: dict[str, str], smtp: SmtpSink) -> dict[str, str]:
    return server_env | {"BUILDBAY_SMTP_URL": smtp.url, "BUILDBAY_MAIL_FROM": "builds@example.com"}


class Http:
    """The API, as each person calls it (a bearer token of their own)."""

    def __init__(self, server: str) -> None:
        self.http = httpx.Client(base_url=server, timeout=30)
        self.tokens: dict[str, str] = {}

    def register(self, email: str, name: str) -> None:
        r = self.http.post("/api/auth/register",
                           json={"email": email, "password": PASSWORD, "name": name})  # fmt: skip
        assert r.status_code == 201, r.text
        self.tokens[email] = r.json()["access_token"]

    def call(self, who: str, method: str, path: str, **kwargs: Any) -> Any:
        headers = {"Authorization": f"Bearer {self.tokens[who]}"}
        r = self.http.request(method, path, headers=headers, **kwargs)
        assert r.is_success, r.text
        return r.json()


@dataclass
class Acme:
    """A project with an Android application and two ready builds (1.0.0, then 1.1.0), its
    owner Lee, a developer Dana and two testers, Tess and Theo."""

    http: Http
    project: str
    app: str
    builds: list[str]

    @property
    def inbox(self) -> str:
        return f"/projects/{self.project}/feedback"

    def build_page(self, build: str) -> str:
        return f"/projects/{self.project}/apps/{self.app}/builds/{build}"

    def send(self, who: str, build: str, text: str, category: str, shots: int = 0,
             context: str | None = None) -> str:  # fmt: skip
        """Feedback as an app sends it: multipart, with `shots` real PNG screenshots."""
        fields = {"text": text, "category": category, "context": context}
        images = [png((320 + 40 * n, 640), (40 * n, 120, 200)) for n in range(shots)]
        body = self.http.call(
            who, "POST", f"/api/app-distribution/{self.project}/{self.app}/builds/{build}/feedback",
            files=form_parts(fields, screenshots(*images)),
        )  # fmt: skip
        return str(body["id"])


@pytest.fixture
def acme(server: str) -> Iterator[Acme]:
    http = Http(server)
    try:
        for name in ("Lee", "Dana", "Tess", "Theo"):
            http.register(f"{name.lower()}@example.com", name)
        lee = "lee@example.com"
        project = http.call(lee, "POST", "/api/projects", json={"name": "Acme"})["id"]
        for email, role in (("dana@example.com", "developer"), ("tess@example.com", "tester"),
                            ("theo@example.com", "tester")):  # fmt: skip
            http.call(lee, "POST", f"/api/projects/{project}/members",
                      json={"email": email, "role": role})  # fmt: skip
        app = http.call(lee, "POST", f"/api/projects/{project}/applications",
                        json={"name": "Acme Android", "platform": "android"})["id"]  # fmt: skip
        base = f"/api/app-distribution/{project}/{app}/builds"
        builds = []
        for version, code in (("1.0.0", 100), ("1.1.0", 110)):
            data = aab(proto_manifest("com.acme.app", version, code))
            named = {"fileName": f"acme-{version}.aab", "fileSize": len(data)}
            link = http.call(lee, "POST", f"{base}/upload-link", json=named)
            put = http.http.put(link["uploadUrl"], content=data, headers=link["uploadHeaders"])
            assert put.is_success, put.text
            builds.append(
                http.call(lee, "POST", f"{base}/verify", json={"buildId": link["buildId"]})[
                    "buildId"
                ]
            )
        yield Acme(http, project, app, builds)
    finally:
        http.http.close()


def _loaded(image: Any) -> bool:
    """Whether the browser drew the image: its bytes arrived and decoded."""
    return bool(image.evaluate("(img) => img.complete && img.naturalWidth > 0"))


def _reply_mail(smtp: SmtpSink, to: str, timeout: float = 60.0) -> Received:
    """The reply's mail to `to`, once it arrived (the outbox sends it after the request)."""
    deadline = time.monotonic() + timeout
    while True:
        found = [m for m in smtp.messages() if m.recipients == [to]
                 and "replied to your feedback" in str(m.message["Subject"])]  # fmt: skip
        if found:
            return found[0]
        if time.monotonic() > deadline:
            pytest.fail(f"no reply mail to {to} in {timeout:.0f} s")
        time.sleep(0.05)


def test_the_inbox_lists_feedback_with_thumbnails_filters_and_status_chips(
    acme: Acme, server: str, new_page: NewPage
) -> None:
    old, new = acme.builds
    first = acme.send("tess@example.com", old, "The login button does nothing on 1.0", "bug",
                      shots=2)  # fmt: skip
    second = acme.send("theo@example.com", new, "It crashes when I rotate the phone", "crash",
                       shots=1, context='{"model": "Pixel 8", "os": "Android 15"}')  # fmt: skip
    third = acme.send("tess@example.com", new, "Could the list be sorted by date?", "suggestion")

    dana = new_page(server)
    sign_in(dana, "dana@example.com")
    dana.goto(f"/projects/{acme.project}")
    dana.get_by_role("link", name="Feedback", exact=True).click()
    expect(dana.get_by_role("heading", level=1)).to_have_text("Feedback")

    rows = dana.locator("#inbox [data-row]")
    expect(rows).to_have_count(3)
    # Newest first, each with its category, excerpt, reporter, build version and time.
    expect(rows.nth(0)).to_have_id(f"feedback-{third}")
    expect(rows.nth(1)).to_have_id(f"feedback-{second}")
    expect(rows.nth(2)).to_have_id(f"feedback-{first}")
    expect(rows.nth(1)).to_contain_text("crash")
    expect(rows.nth(1)).to_contain_text("It crashes when I rotate the phone")
    expect(rows.nth(1)).to_contain_text("Theo")
    expect(rows.nth(1)).to_contain_text("1.1.0 (110)")
    expect(rows.nth(1).locator("time")).to_have_count(1)
    expect(rows.nth(2)).to_contain_text("1.0.0 (100)")
    # Thumbnails: small, lazy, and drawn (their signed addresses are this server's).
    thumbs = rows.nth(2).locator(".thumbs img")
    expect(thumbs).to_have_count(2)
    for n in range(2):
        thumb = thumbs.nth(n)
        thumb.scroll_into_view_if_needed()
        assert thumb.get_attribute("loading") == "lazy"
        assert re.match(r"/feedback-screenshots/fbs_", thumb.get_attribute("src") or "")
        expect(thumb).to_have_attribute("height", "56")
        dana.wait_for_function(
            "(img) => img.complete && img.naturalWidth > 0", arg=thumb.element_handle()
        )
        assert _loaded(thumb)
        assert thumb.bounding_box()["height"] <= 60  # type: ignore[index]
    expect(rows.nth(0).locator(".thumbs img")).to_have_count(0)

    chips = dana.get_by_role("navigation", name="Feedback by status")
    expect(chips.get_by_role("link", name="All 3")).to_have_attribute("aria-current", "true")
    expect(chips.get_by_role("link", name="New 3")).to_be_visible()
    expect(chips.get_by_role("link", name="Resolved 0")).to_be_visible()

    # The filters, as a GET form: by category, then by words of the text.
    dana.get_by_label("Category").select_option("crash")
    dana.get_by_role("button", name="Show").click()
    expect(rows).to_have_count(1)
    expect(rows.first).to_have_id(f"feedback-{second}")
    assert "category=crash" in dana.url
    dana.get_by_label("Category").select_option("")
    dana.get_by_label("Search").fill("LOGIN button")
    dana.get_by_role("button", name="Show").click()
    expect(rows).to_have_count(1)
    expect(rows.first).to_have_id(f"feedback-{first}")
    dana.get_by_role("link", name="Clear the filters").click()
    expect(rows).to_have_count(3)

    # One triaged through the API: the chips count it, and filter on it.
    acme.http.call("dana@example.com", "PATCH", f"/api/projects/{acme.project}/feedback/{first}",
                   json={"status": "triaged"})  # fmt: skip
    dana.reload()
    chips.get_by_role("link", name="Triaged 1").click()
    expect(rows).to_have_count(1)
    expect(rows.first).to_have_id(f"feedback-{first}")
    expect(chips.get_by_role("link", name="Triaged 1")).to_have_attribute("aria-current", "true")
    expect(chips.get_by_role("link", name="New 2")).to_be_visible()

    # The application's inbox: the same, its application fixed; with nothing matching, words.
    dana.goto(f"/projects/{acme.project}/apps/{acme.app}")
    dana.get_by_role("link", name="Feedback", exact=True).click()
    expect(dana.get_by_role("heading", level=1)).to_have_text("Feedback on Acme Android")
    expect(rows).to_have_count(3)
    expect(dana.get_by_label("Application")).to_have_count(0)
    dana.get_by_label("Search").fill("nothing like this")
    dana.get_by_role("button", name="Show").click()
    expect(dana.get_by_text("No feedback matches these filters.")).to_be_visible()


def test_the_viewer_moves_with_j_and_k_triages_and_replies_by_mail(
    acme: Acme, server: str, new_page: NewPage, smtp: SmtpSink
) -> None:
    old, new = acme.builds
    ids = [
        acme.send("tess@example.com", old, "Oldest: the splash screen stays", "bug"),
        acme.send(
            "tess@example.com",
            new,
            "Middle: crash on rotate",
            "crash",
            shots=2,
            context='{"model": "Pixel 8", "os": "Android 15", "locale": "de-DE", '
            '"app": {"build": 110, "flags": ["beta"]}}',
        ),
        acme.send("theo@example.com", new, "Newest: dark mode please", "suggestion"),
    ]
    dana = new_page(server)
    sign_in(dana, "dana@example.com")
    dana.goto(acme.inbox)
    rows = dana.locator("#inbox [data-row]")
    expect(rows).to_have_count(3)

    # j marks the first row, j again the next; k goes back; Enter opens the one marked.
    dana.keyboard.press("j")
    expect(rows.nth(0)).to_have_class(re.compile(r"\bcurrent\b"))
    dana.keyboard.press("j")
    dana.keyboard.press("j")
    expect(rows.nth(2)).to_have_class(re.compile(r"\bcurrent\b"))
    expect(rows.nth(0)).not_to_have_class(re.compile(r"\bcurrent\b"))
    dana.keyboard.press("k")
    expect(rows.nth(1)).to_have_class(re.compile(r"\bcurrent\b"))
    dana.keyboard.press("Enter")
    expect(dana).to_have_url(re.compile(rf"/feedback/{ids[1]}"))

    # The viewer: the screenshots large, the build linked, the device and its context.
    expect(dana.get_by_role("heading", level=1)).to_contain_text(
        "crash on Acme Android 1.1.0 (110)"
    )
    expect(dana.locator(".feedback-text")).to_have_text("Middle: crash on rotate")
    shots = dana.locator(".shots img")
    expect(shots).to_have_count(2)
    dana.wait_for_function(
        "(img) => img.complete && img.naturalWidth > 0", arg=shots.first.element_handle()
    )
    assert shots.first.evaluate("(img) => img.naturalWidth") == 320
    assert shots.first.bounding_box()["width"] > 200  # type: ignore[index]
    expect(dana.locator("#build-link")).to_have_attribute("href", acme.build_page(new))
    device = dana.locator("#device")
    expect(device.locator("dl")).to_contain_text("model")
    expect(device.locator("dl")).to_contain_text("Pixel 8")
    expect(device.locator("dl")).to_contain_text("de-DE")
    device.get_by_text("Context as sent (JSON)").click()
    expect(device.locator("pre")).to_contain_text('"flags": [')
    expect(dana.locator(".meta .reporter")).to_have_text("Tess")

    # j: the older one; k twice: back, then the newest; at the newest, k stays.
    dana.keyboard.press("j")
    expect(dana).to_have_url(re.compile(rf"/feedback/{ids[0]}"))
    dana.keyboard.press("k")
    expect(dana).to_have_url(re.compile(rf"/feedback/{ids[1]}"))
    dana.keyboard.press("k")
    expect(dana).to_have_url(re.compile(rf"/feedback/{ids[2]}"))
    expect(dana.get_by_text("Newest", exact=True)).to_be_visible()
    dana.keyboard.press("j")
    expect(dana).to_have_url(re.compile(rf"/feedback/{ids[1]}"))

    # Typing j into the reply is text, not a move.
    dana.get_by_label("Reply").click()
    dana.keyboard.type("just")
    expect(dana).to_have_url(re.compile(rf"/feedback/{ids[1]}"))
    expect(dana.get_by_label("Reply")).to_have_value("just")
    dana.get_by_label("Reply").fill("")

    # Triage: status and assignee; the page says what was saved, the API agrees.
    dana.get_by_label("Status", exact=True).select_option("triaged")
    dana.get_by_label("Assigned to").select_option(label="Dana (you)")
    dana.locator("#triage").get_by_role("button", name="Save").click()
    expect(dana.get_by_role("status")).to_have_text("Saved: triaged, assigned to Dana.")
    expect(dana.get_by_label("Status", exact=True)).to_have_value("triaged")
    shown = acme.http.call("lee@example.com", "GET",
                           f"/api/projects/{acme.project}/feedback/{ids[1]}")  # fmt: skip
    assert shown["status"] == "triaged"
    assert shown["assignee"]["name"] == "Dana"

    # An empty reply is refused in words beside the field; a real one reaches Tess by mail.
    dana.get_by_role("button", name="Send reply").click()
    expect(dana.locator("#e-reply")).to_have_text("Write a reply first.")
    dana.get_by_label("Reply").fill("Thanks! Fixed in 1.1.1.\nIt is on its way to you.")
    dana.get_by_role("button", name="Send reply").click()
    expect(dana.get_by_role("status")).to_have_text("Reply sent: Tess gets it by mail.")
    expect(dana.locator("ol.comments li")).to_have_count(1)
    expect(dana.locator("ol.comments li")).to_contain_text("Dana")
    expect(dana.locator(".comment-text")).to_have_text(
        "Thanks! Fixed in 1.1.1.\nIt is on its way to you."
    )
    mail = _reply_mail(smtp, "tess@example.com")
    assert "Thanks! Fixed in 1.1.1." in mail.text
    assert "Middle: crash on rotate" in mail.text
    # The inbox counts the reply on its row.
    dana.get_by_role("link", name="Back to the inbox").click()
    expect(dana.locator(f"#feedback-{ids[1]}")).to_contain_text("1 reply")
    expect(dana.locator(f"#feedback-{ids[1]}")).to_contain_text("assigned to Dana")


def test_builds_count_their_new_feedback_and_a_tester_is_refused_the_inbox(
    acme: Acme, server: str, new_page: NewPage
) -> None:
    old, new = acme.builds
    for text in ("First", "Second"):
        acme.send("tess@example.com", new, text, "bug")
    done = acme.send("theo@example.com", new, "Third, already resolved", "bug")
    acme.http.call("dana@example.com", "PATCH", f"/api/projects/{acme.project}/feedback/{done}",
                   json={"status": "resolved"})  # fmt: skip
    acme.send("theo@example.com", old, "On the old one", "other")

    dana = new_page(server)
    sign_in(dana, "dana@example.com")
    dana.goto(f"/projects/{acme.project}/apps/{acme.app}")
    expect(dana.locator(f"#build-{new}").get_by_role("link", name="2 new feedback")).to_be_visible()
    expect(dana.locator(f"#build-{old}").get_by_role("link", name="1 new feedback")).to_be_visible()
    dana.locator(f"#build-{new}").get_by_role("link", name="2 new feedback").click()
    rows = dana.locator("#inbox [data-row]")
    expect(rows).to_have_count(2)
    expect(dana.get_by_label("Build")).to_have_value(new)
    expect(dana.get_by_label("Status", exact=True)).to_have_value("new")
    expect(
        dana.get_by_role("navigation", name="Feedback by status").get_by_role(
            "link", name="Resolved 1"
        )
    ).to_be_visible()

    dana.goto(acme.build_page(new))
    link = dana.locator("#build-feedback")
    expect(link).to_have_text("2 new feedback")
    link.click()
    expect(rows).to_have_count(2)

    # A tester: no count, no link, and the inbox and a feedback's page refused.
    tess = new_page(server)
    sign_in(tess, "tess@example.com")
    tess.goto(f"/projects/{acme.project}/apps/{acme.app}")
    expect(tess.get_by_role("heading", level=1)).to_have_text("Acme Android")
    expect(tess.get_by_text("new feedback")).to_have_count(0)
    expect(tess.get_by_role("link", name="Feedback", exact=True)).to_have_count(0)
    for path in (acme.inbox, f"/projects/{acme.project}/apps/{acme.app}/feedback",
                 f"{acme.inbox}/{done}"):  # fmt: skip
        response = tess.goto(path)
        assert response is not None
        assert response.status == 403, path
        expect(tess.get_by_role("heading", level=1)).to_have_text("Not allowed")
    # Nor may she triage or reply, whatever she posts.
    token = acme.http.tokens["tess@example.com"]
    r = acme.http.http.patch(f"/api/projects/{acme.project}/feedback/{done}",
                             json={"status": "new"},
                             headers={"Authorization": f"Bearer {token}"})  # fmt: skip
    assert r.status_code == 403, r.text
    # Someone of another project: refused too (403 `not_a_member`, as the API's).
    acme.http.register("stranger@example.com", "Stranger")
    stranger = new_page(server)
    sign_in(stranger, "stranger@example.com")
    response = stranger.goto(acme.inbox)
    assert response is not None
    assert response.status == 403
    expect(stranger.get_by_text("You are not a member of this project")).to_be_visible()


def test_what_testers_typed_shows_as_text_on_both_pages(
    acme: Acme, server: str, new_page: NewPage
) -> None:
    attack = '<script>window.pwned = 1</script><b id="bold">bold</b> "quoted" & more'
    context = ('{"model": "<img src=x id=planted>", "note": "</pre><script>window.pwned = 2'
               '</script>", "nested": {"html": "<i>deep</i>"}}')  # fmt: skip
    fid = acme.send("tess@example.com", acme.builds[1], attack, "bug", context=context)

    dana = new_page(server)
    sign_in(dana, "dana@example.com")
    dana.goto(acme.inbox)
    expect(dana.locator(f"#feedback-{fid} .excerpt")).to_have_text(attack)
    dana.goto(f"{acme.inbox}/{fid}")
    expect(dana.locator(".feedback-text")).to_have_text(attack)
    dana.get_by_text("Context as sent (JSON)").click()
    expect(dana.locator("pre.context-json")).to_contain_text("</pre><script>window.pwned = 2")
    expect(dana.locator("pre.context-json")).to_contain_text('"html": "<i>deep</i>"')
    expect(dana.locator("#device dl")).to_contain_text("<img src=x id=planted>")
    assert dana.evaluate("window.pwned === undefined")
    expect(dana.locator("#bold")).to_have_count(0)
    expect(dana.locator("#planted")).to_have_count(0)
    expect(dana.locator("i", has_text="deep")).to_have_count(0)

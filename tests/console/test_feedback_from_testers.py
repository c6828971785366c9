"""A tester sends feedback from the pages, in a real browser: from the install page of their
personal link on a phone (two real PNG screenshots made with Pillow), from the console's build
page, and reads the team's reply on their own feedback page. The page refuses what the API
refuses (a sixth screenshot, a file that is not an image, no text), in sentences beside the
form that keep what was typed; a tester who may not open the build gets no form."""

from __future__ import annotations

import io
import json
import re
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from PIL import Image
from playwright.sync_api import Page, expect

from tests.console import phones
from tests.console.conftest import PHONE
from tests.console.test_console import PASSWORD, sign_in
from tests.devices import IPHONE

pytestmark = pytest.mark.slow

NewPage = Callable[..., Page]
# What a browser sends for a file input left empty: a part with no name and no bytes.
NO_FILE = {"screenshots": ("", b"", "application/octet-stream")}


@dataclass
class Bench:
    """An iOS application with two ready builds: one distributed to Tess, one to nobody."""

    project_id: str
    app_id: str
    distributed: str
    undistributed: str
    tester: dict[str, str]
    owner: dict[str, str]

    def build_path(self, build_id: str) -> str:
        return f"/projects/{self.project_id}/apps/{self.app_id}/builds/{build_id}"

    def feedback(self, http: httpx.Client) -> list[dict[str, Any]]:
        r = http.get(f"/api/projects/{self.project_id}/feedback", headers=self.owner)
        assert r.status_code == 200, r.text
        found: list[dict[str, Any]] = r.json()["feedback"]
        return found


@pytest.fixture
def bench(server: str) -> Bench:
    with httpx.Client(base_url=server, timeout=30) as http:
        acme = phones.acme(http, ("tess@example.com", "Tess"), ("mallory@example.com", "Mallory"))
        distributed = acme.upload(http, "For Tess")
        undistributed = acme.upload(http, "Not for testers yet")
        acme.distribute(http, distributed, "tess@example.com", notify=False)
        tester = acme.testers[0]
        return Bench(acme.project_id, acme.app_id, distributed, undistributed, tester, acme.owner)


def png_file(folder: Path, name: str, size: tuple[int, int], colour: tuple[int, int, int]) -> Path:
    """A real PNG, as a phone's screenshot is one."""
    out = io.BytesIO()
    Image.new("RGB", size, colour).save(out, "PNG")
    path = folder / name
    path.write_bytes(out.getvalue())
    return path


def open_own_install_page(phone: Page) -> str:
    """The tester's personal install page, as they reach it from the console on an iPhone."""
    phone.get_by_role("link", name="Acme").click()
    phone.get_by_role("link", name="Acme iOS").click()
    phone.get_by_role("button", name="Install Example.ipa").click()
    expect(phone).to_have_url(re.compile(r"/install/[^/?#]+$"))
    return phone.url


def test_a_tester_sends_feedback_from_the_install_page_on_a_phone(
    server: str, new_page: NewPage, bench: Bench, tmp_path: Path
) -> None:
    phone = new_page(server, **PHONE, user_agent=IPHONE)
    sign_in(phone, "tess@example.com")
    install_url = open_own_install_page(phone)
    form = phone.locator("form.feedback")
    expect(form).to_be_visible()
    # The page, form included, fits the phone's screen.
    phone.wait_for_load_state("load")
    assert phone.evaluate("document.documentElement.scrollWidth") <= 390

    # Six screenshots: refused in a sentence beside the field, the text typed kept.
    six = [png_file(tmp_path, f"s{n}.png", (30, 20), (n * 40, 10, 10)) for n in range(6)]
    phone.get_by_label("What happened?").fill("The login button does nothing")
    phone.get_by_label("Kind").select_option("bug")
    phone.get_by_label("Screenshots (optional)").set_input_files(six)
    phone.get_by_role("button", name="Send feedback").click()
    error = phone.locator("#fb-e-screenshots")
    expect(error).to_have_text(
        re.compile(r"^Choose at most 5 screenshots: a feedback takes no more")
    )
    expect(phone.get_by_label("What happened?")).to_have_value("The login button does nothing")
    expect(phone.get_by_label("Screenshots (optional)")).to_have_attribute("aria-invalid", "true")

    # A file that is not an image, whatever its name says: refused by decoding it.
    fake = tmp_path / "photo.png"
    fake.write_bytes(b"%PDF-1.7 not a picture at all")
    phone.get_by_label("Kind").select_option("crash")
    phone.get_by_label("Screenshots (optional)").set_input_files([six[0], fake])
    phone.get_by_role("button", name="Send feedback").click()
    expect(phone.locator("#fb-e-screenshots")).to_have_text(
        "Screenshot 2 is not a PNG, JPEG or HEIC image. Choose the screenshots again."
    )
    expect(phone.get_by_label("What happened?")).to_have_value("The login button does nothing")
    expect(phone.get_by_label("Kind")).to_have_value("crash")

    # No text: said so, and nothing is stored.
    phone.get_by_label("What happened?").fill("   ")
    phone.get_by_role("button", name="Send feedback").click()
    expect(phone.locator("#fb-e-text")).to_have_text(
        "The feedback cannot be empty: say what happened."
    )
    with httpx.Client(base_url=server, timeout=30) as http:
        assert bench.feedback(http) == []

    # Two real screenshots: sent, back on the install page, which says so.
    shots = [
        png_file(tmp_path, "login.png", (390, 844), (250, 250, 250)),
        png_file(tmp_path, "after.png", (390, 300), (20, 90, 200)),
    ]
    phone.get_by_label("What happened?").fill("Tapping Sign in does nothing\non iOS 17")
    phone.get_by_label("Kind").select_option("bug")
    phone.get_by_label("Screenshots (optional)").set_input_files(shots)
    phone.get_by_role("button", name="Send feedback").click()
    expect(phone.get_by_role("status")).to_contain_text("Thanks — the team has your feedback.")
    assert phone.url.split("?")[0] == install_url
    expect(
        phone.get_by_role("link", name="See your feedback and the team's replies")
    ).to_be_visible()

    with httpx.Client(base_url=server, timeout=30) as http:
        [sent] = bench.feedback(http)
    assert sent["text"] == "Tapping Sign in does nothing\non iOS 17"
    assert sent["category"] == "bug"
    assert sent["tester"]["email"] == "tess@example.com"
    assert sent["buildId"] == bench.distributed
    assert [(s["width"], s["height"]) for s in sent["screenshots"]] == [(390, 844), (390, 300)]
    # What the phone's browser said of itself (static/feedback.js).
    context = sent["context"]
    assert "iPhone" in context["userAgent"]
    assert context["screen"]["width"] == 390
    assert context["screen"]["pixelRatio"] == 3


def test_the_console_build_page_takes_feedback_and_the_tester_reads_the_reply(
    server: str, new_page: NewPage, bench: Bench, tmp_path: Path
) -> None:
    tess = new_page(server)
    sign_in(tess, "tess@example.com")
    # From the application's page, whose build rows lead a tester to their build's page.
    tess.goto(f"/projects/{bench.project_id}/apps/{bench.app_id}")
    tess.get_by_role("link", name="Send feedback on Example.ipa").click()
    expect(tess).to_have_url(re.compile(re.escape(bench.build_path(bench.distributed))))
    expect(tess.get_by_role("heading", name="Send feedback")).to_be_visible()
    # A tester's page: no team tools on it.
    expect(tess.get_by_role("button", name="Distribute")).to_have_count(0)
    expect(tess.get_by_role("button", name="Create install link")).to_have_count(0)
    typed = '<img src=x onerror="alert(1)"> & <b>bold</b>'
    tess.get_by_label("What happened?").fill(typed)
    tess.get_by_label("Kind").select_option("suggestion")
    tess.get_by_label("Screenshots (optional)").set_input_files(
        [png_file(tmp_path, "one.png", (120, 80), (200, 30, 30))]
    )
    tess.get_by_role("button", name="Send feedback").click()
    expect(tess.get_by_role("status")).to_contain_text("Thanks — the team has your feedback.")
    expect(tess).to_have_url(
        re.compile(re.escape(bench.build_path(bench.distributed)) + "#feedback$")
    )

    with httpx.Client(base_url=server, timeout=30) as http:
        [sent] = bench.feedback(http)
        assert sent["text"] == typed
        assert sent["category"] == "suggestion"
        r = http.post(
            f"/api/projects/{bench.project_id}/feedback/{sent['id']}/comments",
            json={"text": "Thanks <Tess> — fixed in 1.4.3"},
            headers=bench.owner,
        )
        assert r.status_code == 201, r.text

    tess.goto("/account")
    tess.get_by_role("link", name="Your feedback").click()
    item = tess.locator(f"li[id='{sent['id']}']")
    # The text as typed, as text: no element of it made it into the page.
    expect(item.locator(".feedback-text")).to_have_text(typed)
    expect(item.locator(".feedback-text img")).to_have_count(0)
    expect(item.locator(".feedback-text b")).to_have_count(0)
    expect(item.locator(".reply-text")).to_have_text("Thanks <Tess> — fixed in 1.4.3")
    expect(item.locator(".reply .meta")).to_contain_text("Olga")
    expect(item.locator(".status")).to_have_text("Sent")
    # Its screenshot, through its signed address, drawn.
    thumb = item.locator(".thumbnails img")
    expect(thumb).to_have_count(1)
    # A path of this server, whatever the public URL: the page's CSP takes its own images only.
    assert re.match(r"/feedback-screenshots/fbs_", thumb.get_attribute("src") or "")
    expect(thumb).to_have_js_property("naturalWidth", 120)


def test_a_tester_who_may_not_open_the_build_gets_no_form(
    server: str, new_page: NewPage, bench: Bench
) -> None:
    tess = new_page(server)
    sign_in(tess, "tess@example.com")
    response = tess.goto(bench.build_path(bench.undistributed))
    assert response is not None
    assert response.status == 403
    expect(tess.locator("form.feedback")).to_have_count(0)
    # The form posted anyway (with the page's own CSRF token): refused, nothing stored.
    token = tess.locator("input[name=csrf]").first.get_attribute("value")
    refused = tess.request.post(
        bench.build_path(bench.undistributed) + "/feedback",
        multipart={"csrf": token or "", "text": "let me in", "category": "bug"},
        headers={"Origin": server},
    )
    assert refused.status == 403
    with httpx.Client(base_url=server, timeout=30) as http:
        assert bench.feedback(http) == []
        # A shared install link names nobody: its page offers to sign in, and takes no form.
        r = http.post(
            f"/api/app-distribution/{bench.project_id}/{bench.app_id}/builds/"
            f"{bench.distributed}/install-link",
            headers=bench.owner,
        )
        assert r.status_code == 201, r.text
        shared = r.json()["url"]
    tess.goto(shared)
    expect(tess.locator("form.feedback")).to_have_count(0)
    expect(tess.get_by_role("link", name="Send feedback from its page")).to_be_visible()
    posted = tess.request.post(
        urlsplit(shared).path + "/feedback",
        multipart={"text": "from a shared link", "category": "bug"},
        headers={"Accept": "text/html"},
    )
    assert posted.status == 403
    assert "names no tester" in posted.text()


def _own_install_link(server: str, bench: Bench) -> str:
    """Tess's personal install link, as the console makes it for her (its page's address)."""
    with httpx.Client(base_url=server, timeout=30, follow_redirects=False) as http:
        login = http.get("/login")
        csrf = re.search(r'name="csrf" value="([^"]+)"', login.text)
        assert csrf is not None
        r = http.post(
            "/login",
            data={"csrf": csrf[1], "email": "tess@example.com", "password": PASSWORD},
        )
        assert r.status_code == 303, r.text
        page = http.get(f"/projects/{bench.project_id}/apps/{bench.app_id}")
        csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert csrf is not None
        r = http.post(bench.build_path(bench.distributed) + "/install", data={"csrf": csrf[1]})
        assert r.status_code == 303, r.text
        return str(r.headers["location"])


def test_a_body_past_the_limit_is_refused_before_it_is_read(server: str, bench: Bench) -> None:
    """60 MiB, as the API's: a form whose Content-Length says more is answered at once, with a
    page that says so, without a byte of it read."""
    link = _own_install_link(server, bench)
    path = urlsplit(link).path
    host, port = urlsplit(server).hostname, urlsplit(server).port
    assert host is not None
    assert port is not None
    request = (
        f"POST {path}/feedback HTTP/1.1\r\nHost: {host}:{port}\r\nAccept: text/html\r\n"
        "Content-Type: multipart/form-data; boundary=b\r\n"
        f"Content-Length: {61 * 1024 * 1024}\r\n\r\n"
    ).encode()
    with socket.create_connection((host, port), timeout=30) as sock:
        sock.sendall(request)
        answer = b""
        while b"</html>" not in answer:
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413"), head
    assert b"connection: close" in head.lower()
    assert "larger than 60 MiB together" in body.decode()
    with httpx.Client(base_url=server, timeout=30) as http:
        assert bench.feedback(http) == []


def test_the_form_refuses_what_the_api_refuses(server: str, bench: Bench) -> None:
    """Without a browser: a text over 20,000 characters, an unknown category, a screenshot
    that is not an image, each said in a sentence, the text kept (escaped) in the page."""
    link = _own_install_link(server, bench)
    path = urlsplit(link).path + "/feedback"
    with httpx.Client(base_url=server, timeout=30) as http:
        long = http.post(path, data={"text": "x" * 20_001, "category": "bug"}, files=NO_FILE)
        assert long.status_code == 422
        assert "The feedback is longer than 20,000 characters." in long.text
        odd = http.post(
            path,
            data={"text": "<script>alert(1)</script>", "category": "praise"},
            files={"screenshots": ("a.png", b"GIF89a", "image/png")},
        )
        assert odd.status_code == 422
        assert "The category must be one of bug, crash, suggestion, other." in odd.text
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in odd.text
        assert "<script>alert(1)" not in odd.text
        sent = http.post(
            path,
            data={"text": "Works without a script", "category": "other", "context": ""},
            headers={"User-Agent": "TestPhone/1.0", "Accept-Language": "de-CH,de;q=0.9"},
            files=NO_FILE,
        )
        assert sent.status_code == 303
        assert sent.headers["location"].endswith("?sent=1#feedback")
        [stored] = bench.feedback(http)
    # Without the page's script, the server notes what the browser's request said.
    assert stored["context"] == {"userAgent": "TestPhone/1.0", "language": "de-CH"}
    assert json.dumps(stored["context"])

"""Issue 38 end to end, in Chromium, against a real server mailing a real SMTP server: a tester
opens the install page of their distribution mail on a phone, writes feedback with two real
screenshots; the developer, in a browser of their own, finds it in the inbox with its thumbnails
drawn, opens it and replies; the tester gets the reply by mail, follows its link, signs in and
reads the reply on their own feedback page."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.console import phones
from tests.console.conftest import PHONE
from tests.console.test_console import PASSWORD, sign_in
from tests.console.test_feedback_from_testers import png_file
from tests.devices import IPHONE
from tests.smtp import Received, SmtpSink, smtp

__all__ = ["smtp"]
pytestmark = pytest.mark.slow

NewPage = Callable[..., Page]
_LINK = re.compile(r"https?://[^\s<>\"]+/install/[^\s<>\"]+")
_OWN_PAGE = re.compile(r"https?://[^\s<>\"]+/account/feedback#fbk_\w+")


@pytest.fixture
def server_env(server_env: dict[str, str], smtp: SmtpSink) -> dict[str, str]:
    return server_env | {"BUILDBAY_SMTP_URL": smtp.url, "BUILDBAY_MAIL_FROM": "builds@example.com"}


def _mail(smtp: SmtpSink, to: str, subject: str, timeout: float = 60.0) -> Received:
    """The first mail to `to` whose subject holds `subject`, once it arrived (the outbox sends
    it after the request that queued it)."""
    deadline = time.monotonic() + timeout
    while True:
        for received in smtp.messages():
            if received.recipients == [to] and subject in str(received.message["Subject"]):
                return received
        if time.monotonic() > deadline:
            pytest.fail(f"no mail to {to} saying {subject!r} in {timeout:.0f} s")
        time.sleep(0.05)


def test_a_testers_feedback_from_a_phone_reaches_the_team_and_the_reply_reaches_them(
    server: str, new_page: NewPage, smtp: SmtpSink, tmp_path: Path
) -> None:
    with httpx.Client(base_url=server, timeout=30) as http:
        acme = phones.acme(http, ("tess@example.com", "Tess"))
        build = acme.upload(http, "Sign-in reworked")
        acme.distribute(http, build, "tess@example.com", notify=True)

    # Tess, on her phone, not signed in: the install link of her mail is hers.
    [link] = _LINK.findall(_mail(smtp, "tess@example.com", "Acme iOS").text)
    phone = new_page(server, **PHONE, user_agent=IPHONE)
    phone.goto(link)
    expect(phone.get_by_role("heading", name="Send feedback")).to_be_visible()
    shots = [
        png_file(tmp_path, "signin.png", (390, 844), (245, 245, 245)),
        png_file(tmp_path, "spinner.png", (390, 420), (30, 110, 230)),
    ]
    phone.get_by_label("What happened?").fill("Sign in spins forever after I tap it")
    phone.get_by_label("Kind").select_option("bug")
    phone.get_by_label("Screenshots (optional)").set_input_files(shots)
    phone.get_by_role("button", name="Send feedback").click()
    expect(phone.get_by_role("status")).to_contain_text("Thanks — the team has your feedback.")
    phone.wait_for_load_state("load")
    assert phone.evaluate("document.documentElement.scrollWidth") <= 390

    # Olga, at her desk: the inbox has it, with both thumbnails drawn.
    olga = new_page(server)
    sign_in(olga, "olga@example.com")
    olga.goto(f"/projects/{acme.project_id}")
    olga.get_by_role("link", name="Feedback", exact=True).click()
    rows = olga.locator("#inbox [data-row]")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("Sign in spins forever after I tap it")
    expect(rows.first).to_contain_text("Tess")
    thumbs = rows.first.locator(".thumbs img")
    expect(thumbs).to_have_count(2)
    for n in range(2):
        thumb = thumbs.nth(n)
        thumb.scroll_into_view_if_needed()
        olga.wait_for_function(
            "(img) => img.complete && img.naturalWidth > 0", arg=thumb.element_handle()
        )
    widths = [thumbs.nth(n).evaluate("(img) => img.naturalWidth") for n in range(2)]
    assert widths == [390, 390]

    # She opens it: the phone's own words of itself beside it, and replies.
    rows.first.locator("a.open").click()
    expect(olga.locator("main")).to_contain_text("iPhone")
    olga.get_by_label("Reply").fill("Thanks Tess! Fixed in 1.0.1 <b>soon</b>.")
    olga.get_by_role("button", name="Send reply").click()
    expect(olga.get_by_role("status")).to_have_text("Reply sent: Tess gets it by mail.")

    # Tess gets the reply by mail; its link is her own feedback page, where the reply is.
    reply = _mail(smtp, "tess@example.com", "replied to your feedback")
    assert "Thanks Tess! Fixed in 1.0.1 <b>soon</b>." in reply.text
    [own] = _OWN_PAGE.findall(reply.text)
    phone.goto(own)
    expect(phone).to_have_url(re.compile(r"/login"))
    phone.get_by_label("E-mail").fill("tess@example.com")
    phone.get_by_label("Password").fill(PASSWORD)
    phone.get_by_role("button", name="Sign in").click()
    expect(phone).to_have_url(re.compile(r"/account/feedback"))
    item = phone.locator("li.feedback-item")
    expect(item).to_have_count(1)
    expect(item.locator(".feedback-text")).to_have_text("Sign in spins forever after I tap it")
    expect(item.locator(".reply-text")).to_have_text("Thanks Tess! Fixed in 1.0.1 <b>soon</b>.")
    expect(item.locator(".reply-text b")).to_have_count(0)
    expect(item.locator(".thumbnails img")).to_have_count(2)
    phone.wait_for_load_state("load")
    assert phone.evaluate("document.documentElement.scrollWidth") <= 390

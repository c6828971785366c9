"""A group's public join link in a real browser, against a real server that mails through a real
SMTP server: the owner makes the link on the group page (shown once, with its QR code), a
stranger opens it on a phone, gives their address, follows the mail's link and joins, signed in
without a password; the group page counts them; the revoked link's page says so."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from playwright.sync_api import Page, expect

from tests.console.conftest import PHONE
from tests.console.test_console import sign_up
from tests.devices import IPHONE
from tests.smtp import SmtpSink, smtp

__all__ = ["smtp"]
pytestmark = pytest.mark.slow

NewPage = Callable[..., Page]


@pytest.fixture
def server_env(server_env: dict[str, str], smtp: SmtpSink) -> dict[str, str]:
    return server_env | {"BUILDBAY_SMTP_URL": smtp.url, "BUILDBAY_MAIL_FROM": "builds@example.com"}


def _fits(page: Page) -> bool:
    return bool(page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"))


def test_a_stranger_joins_a_group_from_its_link_on_a_phone(
    server: str, new_page: NewPage, smtp: SmtpSink
) -> None:
    owner = new_page(server)
    sign_up(owner, "olive@example.com", "Olive")
    owner.get_by_label("Project name").fill("Acme <Labs>")
    owner.get_by_role("button", name="Create project").click()
    expect(owner.get_by_role("heading", level=1)).to_have_text("Acme <Labs>")
    owner.goto(owner.url.rstrip("/") + "/groups")
    owner.get_by_label("Group name").fill("Beta & friends")
    owner.get_by_role("button", name="Create group").click()
    owner.get_by_label("At most this many testers").fill("5")
    fullwidth = "".join(chr(ord(c) + 0xFEE0) for c in "example")  # NFKC: example
    owner.get_by_label("Only addresses of these domains").fill(fullwidth + ".com")
    owner.get_by_role("button", name="Make a join link for Beta & friends").click()

    expect(owner.get_by_text("Join link made. Copy it now: it is shown this once.")).to_be_visible()
    url = owner.locator(".join-link .secret code").inner_text()
    assert url.startswith(f"{server}/join/bbj_")
    expect(owner.locator(".join-link .qr svg")).to_be_visible()
    expect(owner.locator(".join-state")).to_contain_text("0 testers joined of at most 5")
    expect(owner.locator(".join-state")).to_contain_text("addresses of example.com only")
    owner.reload()  # shown once: gone on the next page
    expect(owner.locator(".join-link .qr svg")).to_have_count(0)

    phone = new_page(server, **PHONE, user_agent=IPHONE)
    phone.goto(url)
    expect(phone.get_by_role("heading", level=1)).to_have_text("Join Beta & friends")
    expect(phone.get_by_text("Acme <Labs>")).to_be_visible()
    assert _fits(phone)
    phone.get_by_label("Your e-mail address").fill("Pat@Example.com")
    phone.get_by_role("button", name="Send me the link").click()
    expect(phone.locator("#join-sent")).to_be_visible()
    assert _fits(phone)

    [mail] = smtp.wait_for(1)
    assert mail.recipients == ["pat@example.com"]
    assert mail.message["Subject"] == "Confirm to join Acme <Labs> on Buildbay"
    phone.goto(mail.link("http"))
    phone.get_by_role("button", name="Join Beta & friends").click()

    expect(phone.get_by_role("heading", level=1)).to_have_text("Acme <Labs>")
    expect(
        phone.get_by_text(re.compile(r"Welcome to Acme <Labs>: you are a tester"))
    ).to_be_visible()
    assert _fits(phone)

    owner.reload()
    expect(owner.locator(".join-state")).to_contain_text("1 tester joined of at most 5")
    beta = owner.locator("section.group").filter(has_text="Beta & friends")
    expect(beta.get_by_role("cell", name="pat@example.com", exact=True)).to_be_visible()
    owner.on("dialog", lambda dialog: dialog.accept())
    owner.get_by_role("button", name="Revoke link of Beta & friends").click()
    expect(owner.get_by_text("Join link revoked")).to_be_visible()

    phone.goto(url)
    expect(phone.locator("#join-closed")).to_contain_text("turned off by the project's team")
    assert _fits(phone)

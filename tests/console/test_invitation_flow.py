"""From invitation to membership in a real browser, against a real server that mails through a
real SMTP server: the owner invites an e-mail from the project page, the invited person opens
the link from the mail, creates an account there and joins the project."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from playwright.sync_api import Page, expect

from tests.console.test_console import sign_up
from tests.smtp import SmtpSink, smtp

__all__ = ["smtp"]
pytestmark = pytest.mark.slow

NewPage = Callable[[str], Page]


@pytest.fixture
def server_env(server_env: dict[str, str], smtp: SmtpSink) -> dict[str, str]:
    return server_env | {"BUILDBAY_SMTP_URL": smtp.url, "BUILDBAY_MAIL_FROM": "builds@example.com"}


def test_an_invited_person_signs_up_from_the_mail_and_joins_the_project(
    server: str, new_page: NewPage, smtp: SmtpSink
) -> None:
    owner = new_page(server)
    sign_up(owner, "olive@example.com", "Olive")
    owner.get_by_label("Project name").fill("Acme")
    owner.get_by_role("button", name="Create project").click()
    expect(owner.get_by_role("heading", level=1)).to_have_text("Acme")
    owner.get_by_label("Invite by e-mail").fill("erin@example.com")
    owner.locator("#f-invite-role").select_option("developer")
    owner.get_by_role("button", name="Send invitation").click()
    expect(owner.get_by_text("Invitation sent to erin@example.com.")).to_be_visible()
    expect(owner.locator("table.invitations td.status")).to_have_text(["pending"])

    [mail] = smtp.wait_for(1)
    assert mail.recipients == ["erin@example.com"]
    assert mail.message["Subject"] == "Olive invited you to Acme on Buildbay"
    link = mail.link("http")
    assert link.startswith(f"{server}/invitations/bbi_")

    erin = new_page(server)
    erin.goto(link)
    expect(erin.get_by_role("heading", level=1)).to_have_text("Join Acme")
    erin.get_by_role("link", name="Create an account").click()
    expect(erin.get_by_label("E-mail")).to_have_value("erin@example.com")
    erin.get_by_label("Password").fill("a long password")
    erin.get_by_role("button", name="Create account").click()
    expect(erin).to_have_url(link)
    erin.get_by_role("button", name="Accept and join Acme").click()

    expect(erin.get_by_text("Welcome: you are a member of this project now.")).to_be_visible()
    expect(erin.get_by_role("heading", level=1)).to_have_text("Acme")
    expect(erin.get_by_text(re.compile(r"Your role:\s*Developer"))).to_be_visible()
    owner.reload()
    expect(owner.locator("table.invitations td.status")).to_have_text(["accepted"])
    expect(owner.get_by_role("cell", name="erin@example.com").first).to_be_visible()

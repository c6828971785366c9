"""The team lead's and the tester's day through the account, members and webhook pages, in a real
browser (issue 36): a token and a webhook secret shown once after the form's redirect, so that a
reload makes no second one; the name, the password and the e-mail address changed (the address
once the link mailed to the new one is followed); signing out everywhere; and a tester, who sees
the others' names but no addresses, and no plan, quota or token form."""

from __future__ import annotations

import re
from collections.abc import Callable

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.console.conftest import add_unverified_member
from tests.console.test_console import PASSWORD, sign_up
from tests.smtp import SmtpSink, smtp

__all__ = ["smtp"]
pytestmark = pytest.mark.slow

NewPage = Callable[[str], Page]


@pytest.fixture
def server_env(server_env: dict[str, str], smtp: SmtpSink) -> dict[str, str]:
    return server_env | {
        "BUILDBAY_SMTP_URL": smtp.url,
        "BUILDBAY_MAIL_FROM": "builds@example.com",
        # The webhook's receiver is on this machine, over http:// (it is never sent to here).
        "BUILDBAY_WEBHOOK_ALLOW_HTTP": "true",
        "BUILDBAY_WEBHOOK_ALLOW_PRIVATE": "true",
    }


def test_the_team_lead_makes_a_token_and_a_webhook_once_and_keeps_the_account(
    server: str, new_page: NewPage, smtp: SmtpSink
) -> None:
    page = new_page(server)
    page.on("dialog", lambda dialog: dialog.accept())
    sign_up(page, "lena@example.com", "Lena")
    page.get_by_label("Project name").fill("Acme")
    page.get_by_role("button", name="Create project").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Acme")
    project_url = page.url

    # A token for CI: shown after the redirect; a reload shows it no more and makes no other.
    page.get_by_role("link", name="Account").click()
    expect(page.get_by_role("heading", name="Plan and usage")).to_be_visible()
    page.get_by_label("Token name").fill("github-actions")
    page.get_by_role("button", name="Create token").click()
    expect(page).to_have_url(re.compile(r"/account#api-tokens$"))
    secret = page.locator("#new-token").inner_text()
    assert secret.startswith("bb_")
    page.reload()
    expect(page.locator("#new-token")).to_have_count(0)
    expect(page.locator("#api-tokens tbody tr")).to_have_count(1)
    api = httpx.get(f"{server}/api/projects", headers={"Authorization": f"Bearer {secret}"})
    assert api.status_code == 200, api.text

    # A webhook: the same.
    page.goto(project_url)
    page.get_by_role("link", name="Manage webhooks").click()
    page.get_by_label("Receiver URL").fill("http://127.0.0.1:9/hook")
    page.get_by_label("build.ready").check()
    page.get_by_role("button", name="Add webhook").click()
    expect(page.get_by_text("Webhook added.")).to_be_visible()
    assert page.locator("#webhook-secret").inner_text().startswith("whsec_")
    page.reload()
    expect(page.locator("#webhook-secret")).to_have_count(0)
    page.get_by_role("link", name="Webhooks").first.click()
    expect(page.locator("table.webhooks tbody tr")).to_have_count(1)

    # The name, then the password: a wrong current one is said beside the field.
    page.get_by_role("link", name="Account").click()
    page.get_by_label("Your name").fill("Lena Lead")
    page.get_by_role("button", name="Save name").click()
    expect(page.get_by_text("Your name is saved.")).to_be_visible()
    expect(page.locator("#profile")).to_contain_text("Lena Lead · lena@example.com")
    page.get_by_label("Current password").fill("not my password")
    page.get_by_label("New password").fill("an even longer password")
    page.get_by_role("button", name="Change password").click()
    expect(page.locator("#e-currentPassword")).to_have_text("That is not your current password.")
    page.get_by_label("Current password").fill(PASSWORD)
    page.get_by_label("New password").fill("an even longer password")
    page.get_by_role("button", name="Change password").click()
    expect(page.get_by_text("Your password is changed")).to_be_visible()

    # The e-mail address: it moves once the link mailed to the new one is followed.
    page.get_by_label("New e-mail address").fill("lena@example.org")
    page.get_by_label("Your password", exact=True).fill("an even longer password")
    page.get_by_role("button", name="Change e-mail address").click()
    expect(
        page.get_by_text("A confirmation mail is on its way to lena@example.org")
    ).to_be_visible()
    expect(page.locator(".pending-email")).to_contain_text("lena@example.org")
    [mail] = [m for m in smtp.wait_for(1) if m.recipients == ["lena@example.org"]]
    page.goto(mail.link("http"))
    page.get_by_role("button", name="Change my e-mail address").click()
    expect(page.get_by_text("Your e-mail address is changed.")).to_be_visible()
    page.goto("/account")
    expect(page.locator("#profile")).to_contain_text("Lena Lead · lena@example.org")
    [told] = smtp.wait_for(2)[1:]
    assert told.recipients == ["lena@example.com"]

    # Signing out everywhere: this browser too.
    page.get_by_role("button", name="Sign out everywhere").click()
    expect(page.get_by_text("You are signed out everywhere")).to_be_visible()
    page.goto("/account")
    expect(page).to_have_url(re.compile(r"/login\?next=/account$"))


def test_a_tester_sees_names_not_addresses_and_only_the_account_forms_they_use(
    server: str, new_page: NewPage
) -> None:
    lead = new_page(server)
    sign_up(lead, "lena@example.com", "Lena Lead")
    lead.get_by_label("Project name").fill("Acme")
    lead.get_by_role("button", name="Create project").click()
    expect(lead.get_by_role("heading", level=1)).to_have_text("Acme")
    tess = new_page(server)
    sign_up(tess, "tess@example.com", "Tess")
    tom = new_page(server)
    sign_up(tom, "tom@example.com", "Tom")
    add_unverified_member(lead, "tess@example.com")
    add_unverified_member(lead, "tom@example.com")

    tess.goto("/projects")  # signed in since signing up
    tess.get_by_role("link", name="Acme").click()
    members = tess.locator("#members")
    expect(members).to_contain_text("Lena Lead")
    expect(members).to_contain_text("Tom")
    expect(members).not_to_contain_text("@example.com")
    expect(members.get_by_role("columnheader", name="E-mail")).to_have_count(0)
    tess.get_by_role("link", name="Tester groups").click()
    expect(tess.locator("main")).to_contain_text("Tom")
    expect(tess.locator("main")).not_to_contain_text("@example.com")

    tess.get_by_role("link", name="Account").click()
    expect(tess.get_by_role("heading", name="Plan and usage")).to_have_count(0)
    expect(tess.get_by_role("button", name="Create token")).to_have_count(0)
    expect(tess.get_by_role("heading", name="API tokens")).to_have_count(0)
    tess.get_by_label("Your name").fill("Tess Tester")
    tess.get_by_role("button", name="Save name").click()
    expect(tess.get_by_text("Your name is saved.")).to_be_visible()
    expect(tess.get_by_role("button", name="Sign out everywhere")).to_be_visible()

    # The team lead sees the addresses, and the tester's new name.
    lead.reload()
    expect(lead.locator("#members")).to_contain_text("tess@example.com")
    expect(lead.locator("#members")).to_contain_text("Tess Tester")

"""An admin adds a trusted publisher on the application's settings page, in Chromium, and removes
it; a pattern that would trust other repositories is refused in a sentence."""

from __future__ import annotations

from playwright.sync_api import expect

from tests.console.test_console import create_project_and_app, sign_up
from tests.console.test_feedback_end_to_end import NewPage


def test_an_admin_adds_a_trusted_publisher_and_removes_it(server: str, new_page: NewPage) -> None:
    page = new_page(server)
    sign_up(page, "tara@example.com", "Tara")
    app_url = create_project_and_app(page)
    page.goto(app_url.rstrip("/") + "/settings")
    section = page.locator("#trusted-publishers")
    expect(section.get_by_text("None yet")).to_be_visible()
    expect(page.get_by_label("Audience")).to_have_value("127.0.0.1")  # the server's host
    # The job names the application (a publisher grants only its own): the command says how.
    app_id = app_url.rstrip("/").rsplit("/", 1)[1]
    assert app_id.startswith("app_"), app_url
    expect(section.locator("p code").first).to_have_text(f"buildbay upload --app-id {app_id}")

    github = "GitHub Actions (https://token.actions.githubusercontent.com)"
    page.get_by_label("Issuer", exact=True).select_option(label=github)
    page.get_by_label("Subject pattern").fill("repo:*")
    page.get_by_role("button", name="Add trusted publisher").click()
    expect(page.get_by_text("before any `*`")).to_be_visible()

    page.get_by_label("Subject pattern").fill("repo:acme/shop:ref:refs/heads/main")
    page.get_by_label("Audience").fill("builds.example.com")
    page.get_by_role("button", name="Add trusted publisher").click()

    expect(page.get_by_text("Added a trusted publisher")).to_be_visible()
    row = section.locator("tbody tr")
    expect(row).to_have_count(1)
    expect(row.locator("td").nth(0)).to_have_text("https://token.actions.githubusercontent.com")
    expect(row.locator("td").nth(1)).to_have_text("repo:acme/shop:ref:refs/heads/main")
    expect(row.locator("td").nth(2)).to_have_text("builds.example.com")

    page.get_by_role(
        "button", name="Remove the publisher repo:acme/shop:ref:refs/heads/main"
    ).click()
    expect(page.get_by_text("Removed the trusted publisher")).to_be_visible()
    expect(section.get_by_text("None yet")).to_be_visible()

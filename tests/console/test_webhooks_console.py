"""The webhooks pages in a real browser, against a real server whose worker delivers to a real
receiver (which verifies each message with the `standardwebhooks` package): add a webhook (its
secret shown once), send a test, read the log, send again, rotate, edit, disable."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.console.test_console import sign_up
from tests.webhooks.receiver import Receiver, receiving

pytestmark = pytest.mark.slow

NewPage = Callable[[str], Page]
# Where to leave screenshots of the pages, to look at them (unset: none).
SHOTS = (
    Path(os.environ["BUILDBAY_TEST_SCREENSHOTS"])
    if "BUILDBAY_TEST_SCREENSHOTS" in os.environ
    else None
)


@pytest.fixture
def server_env(server_env: dict[str, str]) -> dict[str, str]:
    # A closed network's settings: the receiver is on 127.0.0.1, over http://.
    return server_env | {
        "BUILDBAY_WEBHOOK_ALLOW_HTTP": "true",
        "BUILDBAY_WEBHOOK_ALLOW_PRIVATE": "true",
    }


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with receiving() as r:
        yield r


def wait_for(receiver: Receiver, count: int, seconds: float = 15.0) -> None:
    deadline = time.monotonic() + seconds
    while len(receiver.received) < count:
        assert time.monotonic() < deadline, f"{len(receiver.received)} of {count} arrived"
        time.sleep(0.05)


def reload_until(page: Page, selector: str, texts: list[str], seconds: float = 15.0) -> None:
    """Reload until `selector` shows `texts`: the receiver has a message a moment before the
    server records the attempt that sent it."""
    deadline = time.monotonic() + seconds
    while True:
        page.reload()
        if page.locator(selector).all_inner_texts() == texts:
            return
        assert time.monotonic() < deadline, page.locator(selector).all_inner_texts()
        time.sleep(0.1)


def test_an_admin_adds_a_webhook_tests_it_and_reads_its_log(
    server: str, new_page: NewPage, receiver: Receiver
) -> None:
    page = new_page(server)
    page.on("dialog", lambda dialog: dialog.accept())
    sign_up(page, "olive@example.com", "Olive")
    page.get_by_label("Project name").fill("Acme")
    page.get_by_role("button", name="Create project").click()
    page.get_by_role("link", name="Manage webhooks").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Webhooks")
    expect(page.get_by_text("No webhooks yet.")).to_be_visible()

    page.get_by_role("button", name="Add webhook").click()
    expect(page.get_by_text("Choose at least one event.")).to_be_visible()
    page.get_by_label("Receiver URL").fill("ftp://example.com/x")
    page.get_by_label("build.ready").check()
    page.get_by_role("button", name="Add webhook").click()
    expect(page.get_by_text("must be an https:// URL")).to_be_visible()

    page.get_by_label("Receiver URL").fill(receiver.url)
    page.get_by_label("Description (optional)").fill("Release chat")
    page.get_by_label("member.added").check()
    page.get_by_role("button", name="Add webhook").click()
    expect(page.get_by_text("Webhook added.")).to_be_visible()
    secret = page.locator("#webhook-secret").inner_text()
    assert secret.startswith("whsec_")
    receiver.secrets.append(secret)

    page.get_by_role("button", name="Send test event").click()
    expect(page.get_by_text("Test event sent")).to_be_visible()
    webhook_url = page.url.split("?")[0]
    expect(page.locator("#webhook-secret")).to_have_count(0)  # shown once only
    wait_for(receiver, 1)
    [message] = receiver.received
    assert message.verified_by == [secret], message.error
    assert message.payload["type"] == "webhook.test"

    reload_until(page, "table.deliveries .status", ["delivered"])
    if SHOTS:
        page.screenshot(path=SHOTS / "webhook.png", full_page=True)
    page.get_by_role("link", name="Details").click()
    expect(page.locator("table.attempts td[data-label=Answer]")).to_have_text(["200"])
    expect(page.get_by_text(message.id)).to_be_visible()
    page.get_by_role("button", name="Send again").click()
    expect(page.get_by_text("Sent again")).to_be_visible()
    wait_for(receiver, 2)
    assert receiver.received[1].id == message.id
    reload_until(page, "table.attempts td[data-label=Answer]", ["200", "200"])
    if SHOTS:
        page.screenshot(path=SHOTS / "delivery.png", full_page=True)

    page.goto(webhook_url)
    page.get_by_role("button", name="Rotate secret").click()
    expect(page.get_by_text("New secret made")).to_be_visible()
    rotated = page.locator("#webhook-secret").inner_text()
    assert rotated.startswith("whsec_")
    assert rotated != secret
    receiver.secrets.append(rotated)
    page.get_by_role("button", name="Send test event").click()
    wait_for(receiver, 3)
    assert receiver.received[2].verified_by == [secret, rotated]

    page.get_by_label("member.added").uncheck()
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_text("Webhook saved.")).to_be_visible()
    expect(page.get_by_label("member.added")).not_to_be_checked()
    expect(page.get_by_label("build.ready")).to_be_checked()

    page.get_by_role("button", name="Disable").click()
    expect(page.get_by_text("Webhook disabled")).to_be_visible()
    expect(page.get_by_role("button", name="Send test event")).to_have_count(0)
    page.get_by_role("button", name="Enable").click()
    expect(page.get_by_text("Webhook enabled.")).to_be_visible()

    page.get_by_role("link", name="Webhooks").click()
    expect(page.locator("table.webhooks td.state")).to_have_text(["enabled"])

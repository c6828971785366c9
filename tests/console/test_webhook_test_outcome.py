"""Issue 36: the console's "Send test event" shows the attempt's outcome once it is known: in
Chromium without a reload (the page asks for it), and without JavaScript on the page after the
form and on a reload."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable

import httpx
import pytest
from fastapi import FastAPI
from playwright.sync_api import Page, expect

from buildbay.context import AppContext
from tests.conftest import Account, Api
from tests.console.test_console import sign_up
from tests.console.test_webhook_log import ORIGIN, _csrf, _sign_in, _text, app, console, settings
from tests.console.test_webhooks_console import receiver, server_env, wait_for
from tests.webhooks.receiver import Answer, Receiver

__all__ = ["app", "console", "receiver", "server_env", "settings"]

NewPage = Callable[[str], Page]


def _said(html: str) -> str:
    return " ".join(_text(html).split())


@pytest.mark.slow
def test_the_outcome_of_a_test_event_appears_without_a_reload(
    server: str, new_page: NewPage, receiver: Receiver
) -> None:
    page = new_page(server)
    sign_up(page, "olive@example.com", "Olive")
    page.get_by_label("Project name").fill("Acme")
    page.get_by_role("button", name="Create project").click()
    page.get_by_role("link", name="Manage webhooks").click()
    page.get_by_label("Receiver URL").fill(receiver.url)
    page.get_by_label("build.ready").check()
    page.get_by_role("button", name="Add webhook").click()
    expect(page.get_by_text("Webhook added.")).to_be_visible()
    receiver.secrets.append(page.locator("#webhook-secret").inner_text())

    # The receiver holds its answer: the page is shown while the attempt is in flight.
    gate = threading.Event()
    receiver.default = Answer(503, release=gate)
    page.get_by_role("button", name="Send test event").click()
    outcome = page.locator("#test-outcome .outcome-text")
    expect(outcome).to_have_text("Sending the test event…")
    expect(page.get_by_text("Reload the page to see the outcome.")).to_be_hidden()
    page.evaluate("window.notReloaded = true")
    wait_for(receiver, 1)
    assert receiver.received[0].verified_by
    gate.set()

    expect(outcome).to_have_text(
        re.compile(r"Not delivered: the receiver answered 503 in \d+ ms\. It is tried again"),
        timeout=20_000,
    )
    assert page.evaluate("window.notReloaded") is True  # the same page, told

    receiver.default = Answer(200)
    page.get_by_role("button", name="Send test event").click()
    expect(outcome).to_have_text(
        re.compile(r"Delivered: the receiver answered 200 in \d+ ms\."), timeout=20_000
    )


async def test_without_javascript_the_page_after_the_form_tells_the_outcome(
    console: httpx.AsyncClient, api: Api, owner: Account, app: FastAPI
) -> None:
    project = await api.project(owner)
    await _sign_in(console, owner)
    r = await api.client.post(
        f"/api/projects/{project['id']}/webhooks",
        json={"url": "http://hooks.nowhere.invalid/x", "events": ["build.ready"]},
        headers=owner.headers,
    )
    assert r.status_code == 201, r.text
    webhook_id = r.json()["id"]
    page_path = f"/projects/{project['id']}/webhooks/{webhook_id}"
    csrf = await _csrf(console, page_path)

    sent = await console.post(f"{page_path}/test", headers=ORIGIN, data={"csrf": csrf})

    assert sent.status_code == 303, sent.text[:300]
    location = sent.headers["location"]
    found = re.fullmatch(rf"{page_path}\?test=(whd_\w+)#test-outcome", location)
    assert found, location
    delivery_id = found.group(1)
    page = await console.get(location)
    assert "Test event sent." in _said(page.text)
    assert "Sending the test event… Reload the page to see the outcome." in _said(page.text)
    outcome_path = f"{page_path}/deliveries/{delivery_id}/outcome"
    assert f'data-outcome="{outcome_path}"' in page.text
    asked = await console.get(outcome_path)
    assert asked.json() == {"known": False, "text": "Sending the test event…"}
    assert asked.headers["cache-control"] == "no-store"

    ctx: AppContext = app.state.ctx
    assert ctx.jobs is not None
    await ctx.jobs.run_until_idle()  # the attempt: refused (a name that does not resolve)

    told = "Not delivered: refused: not a public address"
    page = await console.get(location)
    assert told in _said(page.text)
    assert "Reload the page" not in _said(page.text)
    asked = await console.get(outcome_path)
    assert asked.json()["known"] is True
    assert asked.json()["text"].startswith(told)
    # Another project's admin, or a tester, is told nothing.
    stranger = await api.register("stranger@example.com")
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url=console.base_url) as other:
        await _sign_in(other, stranger)
        r = await other.get(outcome_path)
        assert r.status_code in {403, 404}
        assert "refused" not in r.text

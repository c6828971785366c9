"""Issue 40: a webhook's chat format in the console, in Chromium: the hint of the format an
address looks like it needs (and the warning when the one chosen is another) as the address is
typed, the preview of the message with a real build's data measured against the target's
limits, the notes shown as text, and a test message that arrives unsigned in Slack's shape."""

from __future__ import annotations

import json
import re
from collections.abc import Callable

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.builds.android_files import APK
from tests.console.test_console import PASSWORD, create_project_and_app, sign_up
from tests.console.test_webhooks_console import receiver, server_env, wait_for
from tests.webhooks.receiver import Receiver

__all__ = ["receiver", "server_env"]

pytestmark = pytest.mark.slow

NewPage = Callable[..., Page]
NOTES = "Fixes <script>document.title='x'</script> & *bold* @channel <!everyone>"


def _upload(server: str, email: str, app_url: str, notes: str) -> None:
    """A real APK uploaded through the API, as CI would."""
    project_id, app_id = re.findall(r"/(?:projects|apps)/([^/]+)", app_url)
    data = APK.read_bytes()
    with httpx.Client(base_url=server, timeout=30) as http:
        login = http.post("/api/auth/login", json={"email": email, "password": PASSWORD})
        auth = {"Authorization": f"Bearer {login.json()['access_token']}"}
        base = f"/api/app-distribution/{project_id}/{app_id}/builds"
        r = http.post(f"{base}/upload-link", headers=auth,
                      json={"fileName": "app-release.apk", "fileSize": len(data)})  # fmt: skip
        assert r.status_code == 201, r.text
        link = r.json()
        r = http.put(link["uploadUrl"], content=data, headers=link["uploadHeaders"])
        assert r.status_code == 200, r.text
        r = http.post(f"{base}/verify", headers=auth,
                      json={"buildId": link["buildId"], "notes": notes})  # fmt: skip
        assert r.status_code == 200, r.text


def test_the_console_hints_the_format_and_previews_a_real_build_within_limits(
    server: str, new_page: NewPage, receiver: Receiver
) -> None:
    page = new_page(server)
    sign_up(page, "olive@example.com", "Olive")
    app_url = create_project_and_app(page)
    _upload(server, "olive@example.com", app_url, NOTES)
    title = page.title()
    page.goto(app_url.rsplit("/apps/", 1)[0] + "/webhooks")

    url, fmt = page.get_by_label("Receiver URL"), page.get_by_label("Format")
    suggested = page.locator("[data-suggested]")
    warning = page.locator("[data-format-warning]")
    url.fill("https://hooks.slack.com/services/T000/B000/XXXX")
    expect(suggested).to_have_text("This address looks like Slack's.")
    expect(warning).to_contain_text("choose Slack, or it is sent messages it cannot read")
    fmt.select_option("slack")
    expect(warning).to_be_hidden()
    url.fill("https://discord.com/api/webhooks/1/abc")
    expect(suggested).to_contain_text("Discord")
    expect(warning).to_be_visible()
    url.fill("https://Prod-12.WestEurope.logic.azure.com./workflows/abc")  # a host's suffix
    expect(suggested).to_contain_text("Microsoft Teams")
    url.fill("https://discord.com/not-a-webhook")  # the host, not the path
    expect(suggested).to_be_hidden()
    url.fill(receiver.url)  # a receiver of the test's own, told to take Slack's messages
    expect(suggested).to_be_hidden()
    expect(warning).to_contain_text("does not look like Slack's webhook address")
    page.get_by_label("build.ready").check()
    page.get_by_role("button", name="Add webhook").click()
    expect(page.get_by_text("Webhook added.")).to_be_visible()
    expect(page.locator("[data-format-warning]")).to_contain_text("does not look like Slack's")

    page.get_by_role("link", name="Preview the message").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Preview: Slack")
    expect(page.locator("#limits-title")).to_have_text("Within Slack's limits: yes")
    expect(page.locator("#preview-title")).to_contain_text("Acme Android")
    expect(page.locator("#preview-title")).to_contain_text("is ready")
    expect(page.locator("#preview-notes")).to_have_text(NOTES)  # text, not markup
    assert page.title() != "x"
    body = json.loads(page.locator("#preview-body").inner_text())
    shown = json.dumps(body, ensure_ascii=False)
    assert "&lt;script&gt;" in shown
    assert "<!everyone>" not in shown
    assert "@channel" not in shown
    assert len(body["blocks"]) <= 50

    page.get_by_label("Format").select_option("discord")
    page.get_by_role("button", name="Show").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Preview: Discord")
    expect(page.locator("#limits-title")).to_have_text("Within Discord's limits: yes")
    body = json.loads(page.locator("#preview-body").inner_text())
    assert body["allowed_mentions"] == {"parse": []}
    assert title  # the page titles were the console's throughout

    page.go_back()
    page.go_back()
    page.get_by_role("button", name="Send test event").click()
    wait_for(receiver, 1)
    [message] = receiver.received
    assert "webhook-signature" not in message.headers
    assert "A test message from Buildbay" in message.payload["text"]
    assert message.payload["blocks"][0]["type"] == "header"

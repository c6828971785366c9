"""Issue 40 without JavaScript: the webhook form takes a format and the page after it says which
one the address looks like it needs; the preview of a project with no ready build is a test
message; another project's webhook, a tester, or an unknown format never shows anything."""

from __future__ import annotations

import json
import re
from html import unescape

import httpx
from fastapi import FastAPI

from buildbay.webhooks.chat import hint_table
from tests.conftest import Account, Api
from tests.console.test_webhook_log import ORIGIN, _csrf, _sign_in, _text, app, console, settings

__all__ = ["app", "console", "settings"]


def _said(html: str) -> str:
    return " ".join(_text(html).split())


async def test_the_form_takes_a_format_and_the_page_after_warns_of_a_mismatch(
    console: httpx.AsyncClient, api: Api, owner: Account
) -> None:
    project = await api.project(owner)
    await _sign_in(console, owner)
    path = f"/projects/{project['id']}/webhooks"
    csrf = await _csrf(console, path)
    r = await console.post(path, headers=ORIGIN, data={
        "csrf": csrf, "url": "https://hooks.slack.com/services/T0/B0/x", "format": "standard",
        "events": ["build.ready", "build.failed"],
    })  # fmt: skip
    assert r.status_code == 303, r.text[:300]
    page = await console.get(r.headers["location"])
    said = _said(page.text)
    assert "looks like <strong data-suggested-label>Slack</strong>'s." in page.text
    assert "choose Slack, or it is sent messages it cannot read" in said
    # The hint's hosts and the script's rules are the server's one table, not a copy.
    assert "hooks.slack.com → Slack; discord.com/api/webhooks → Discord;" in unescape(page.text)
    [script] = re.findall(r"data-format-advice='([^']*)'", page.text)
    assert json.loads(unescape(script))["rules"] == json.loads(json.dumps(hint_table()))
    webhook_path = r.headers["location"]

    csrf = await _csrf(console, webhook_path)
    r = await console.post(webhook_path, headers=ORIGIN, data={
        "csrf": csrf, "url": "https://hooks.slack.com/services/T0/B0/x", "format": "slack",
        "events": ["build.ready"],
    })  # fmt: skip
    assert r.status_code == 303, r.text[:300]
    page = await console.get(webhook_path)
    assert "cannot read" not in _said(page.text)
    assert re.search(r'<option value="slack" selected>', page.text)
    listed = await api.client.get(f"/api{path}", headers=owner.headers)
    [hook] = listed.json()["webhooks"]
    assert (hook["format"], hook["events"]) == ("slack", ["build.ready"])

    csrf = await _csrf(console, webhook_path)
    r = await console.post(webhook_path, headers=ORIGIN, data={
        "csrf": csrf, "url": "https://hooks.slack.com/services/T0/B0/x", "format": "irc",
        "events": ["build.ready"],
    })  # fmt: skip
    assert r.status_code == 422
    assert "Choose one of the formats." in _said(r.text)


async def test_the_preview_without_a_ready_build_is_the_test_message_and_stays_in_its_project(
    console: httpx.AsyncClient, api: Api, owner: Account, app: FastAPI
) -> None:
    project = await api.project(owner)
    other = await api.project(owner, "Other")
    r = await api.client.post(
        f"/api/projects/{project['id']}/webhooks",
        json={"url": "https://discord.com/api/webhooks/1/x", "events": ["build.ready"],
              "format": "discord"},
        headers=owner.headers,
    )  # fmt: skip
    assert r.status_code == 201, r.text
    webhook_id = r.json()["id"]
    await _sign_in(console, owner)
    page = await console.get(f"/projects/{project['id']}/webhooks/{webhook_id}/preview")
    assert page.status_code == 200, page.text[:300]
    said = _said(page.text)
    assert "Preview: Discord" in said
    assert "a test event (the project has no ready build yet)" in said
    assert "Within Discord's limits: yes" in said
    body = re.search(r'<pre class="payload" id="preview-body"><code>(.*?)</code>', page.text, re.S)
    assert body
    message = json.loads(unescape(body.group(1)))
    assert "A test message from Buildbay for Acme" in message["embeds"][0]["title"]
    odd = await console.get(
        f"/projects/{project['id']}/webhooks/{webhook_id}/preview?format=irc&build=bld_x"
    )
    assert odd.status_code == 200  # its own format, its latest build: nothing asked is taken
    assert "Preview: Discord" in _said(odd.text)
    elsewhere = await console.get(f"/projects/{other['id']}/webhooks/{webhook_id}/preview")
    assert elsewhere.status_code == 404

    tester = await api.register("tess@example.com")
    await api.add_member(owner, project["id"], tester, "tester")
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url=str(console.base_url)
    ) as browser:
        await _sign_in(browser, tester)
        refused = await browser.get(f"/projects/{project['id']}/webhooks/{webhook_id}/preview")
    assert refused.status_code == 403
    assert "embeds" not in refused.text

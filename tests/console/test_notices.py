"""The console's notice box speaks for the server only (through the app itself, no browser):
what a form's answer leaves for the next page (`Visitor.tell`, a cookie the server signs for
the visitor), shown once, and never text from the address, which anyone can write into a link
(`/projects/{id}?notice=Your session expired. Sign in again at https://...`). The browser
scenarios (test_console_pages.py, test_webhooks_console.py, test_releases.py,
test_invitation_flow.py) follow the same notices through their forms."""

from __future__ import annotations

import re
from urllib.parse import quote

import httpx
import pytest
from fastapi import FastAPI
from pydantic import SecretStr

from buildbay.config import Settings
from tests.console.test_distribution_pages import browser
from tests.console.test_mail_pages import post, sign_in
from tests.distribution.conftest import Team, smtp, team
from tests.smtp import SmtpSink

__all__ = ["browser", "smtp", "team"]

PHISHING = "Your session expired. Sign in again at https://buildbay.example.evil/login"
NOTICE_BOX = re.compile(r'<p class="notice" role="status">([^<]*)</p>')


@pytest.fixture
def settings(settings: Settings, smtp: SmtpSink) -> Settings:
    settings.smtp_url = SecretStr(smtp.url)
    # A webhook receiver on this machine: made, and sent to nowhere that answers.
    return settings.model_copy(update={"webhook_allow_http": True, "webhook_allow_private": True})


def notices(page: httpx.Response) -> list[str]:
    return [found for found in NOTICE_BOX.findall(page.text) if found.strip()]


async def _webhook(team: Team) -> str:
    r = await team.client.post(
        f"/api/projects/{team.project['id']}/webhooks",
        json={"url": "http://127.0.0.1:9/hook", "events": ["build.ready"]},
        headers=team.owner.headers,
    )
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


async def _pages(team: Team, browser: httpx.AsyncClient) -> list[str]:
    """Every console page that has a notice box."""
    project = f"/projects/{team.project['id']}"
    application = f"{project}/apps/{team.application['id']}"
    build = await team.upload()
    webhook = f"{project}/webhooks/{await _webhook(team)}"
    r = await post(browser, f"{webhook}/test", {}, page=webhook)
    assert r.status_code == 303, r.text
    delivery = re.search(
        r'href="(/projects/[^"]+/deliveries/[^"]+)"', (await browser.get(webhook)).text
    )
    assert delivery, "the test event's delivery is listed"
    return [
        project,
        f"{project}/groups",
        application,
        f"{application}/settings",
        f"{application}/builds/{build['buildId']}",
        webhook,
        delivery[1],
    ]


async def test_text_in_the_address_is_never_shown_as_the_servers_notice(
    team: Team, browser: httpx.AsyncClient
) -> None:
    await sign_in(browser, team.owner.email)
    for path in await _pages(team, browser):
        await browser.get(path)  # whatever a form left is shown, and gone
        for query in (f"notice={quote(PHISHING)}", "notice=key-rotated", "saved=1",
                      f"settings_error={quote(PHISHING)}"):  # fmt: skip
            r = await browser.get(f"{path}?{query}")
            assert r.status_code == 200, (path, r.text)
            assert "session expired" not in r.text, (path, query)
            assert notices(r) == [], (path, query, notices(r))


async def test_a_forms_notice_is_shown_on_the_next_page_once(
    team: Team, browser: httpx.AsyncClient
) -> None:
    await sign_in(browser, team.owner.email)
    project = f"/projects/{team.project['id']}"

    invite = {"email": "tess@example.com", "role": "tester"}
    r = await post(browser, f"{project}/invitations", invite, page=project)
    assert (r.status_code, r.headers["location"]) == (303, f"{project}#invitations")
    shown = await browser.get(r.headers["location"])
    assert notices(shown) == ["Invitation sent to tess@example.com."]
    assert notices(await browser.get(project)) == []  # once

    resend = re.search(r'action="(/projects/[^"]+/invitations/inv_\w+/resend)"', shown.text)
    assert resend, shown.text
    r = await post(browser, resend[1], {}, page=project)
    assert notices(await browser.get(r.headers["location"])) == [
        "Invitation sent again to tess@example.com. The link of the earlier mail still works."
    ]

    groups = f"{project}/groups"
    r = await post(browser, groups, {"name": "QA"}, page=groups)
    assert notices(await browser.get(r.headers["location"])) == ["Group QA created."]
    group = re.search(
        r'action="(/projects/[^"]+/groups/grp_\w+)/delete"', (await browser.get(groups)).text
    )
    assert group
    r = await post(browser, f"{group[1]}/delete", {}, page=groups)
    assert notices(await browser.get(r.headers["location"])) == ["Group deleted."]


async def test_a_notice_shows_the_text_the_server_wrote_even_with_markup(
    team: Team, browser: httpx.AsyncClient
) -> None:
    """The notice names what the visitor made ("Group <b>QA</b> created."): escaped, as any
    text of theirs on a page."""
    await sign_in(browser, team.owner.email)
    groups = f"/projects/{team.project['id']}/groups"
    r = await post(browser, groups, {"name": "<b>QA</b> é"}, page=groups)
    shown = await browser.get(r.headers["location"])
    assert notices(shown) == ["Group &lt;b&gt;QA&lt;/b&gt; é created."]


async def test_a_notice_left_for_another_visitor_or_made_up_shows_nothing(
    team: Team, browser: httpx.AsyncClient, app: FastAPI
) -> None:
    await sign_in(browser, team.owner.email)
    groups = f"/projects/{team.project['id']}/groups"
    r = await post(browser, groups, {"name": "QA"}, page=groups)
    sealed = browser.cookies["bb_notice"]
    assert "QA" not in sealed  # signed, not readable as is

    # The same cookie in another visitor's browser (another session): nothing.
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url=str(browser.base_url)) as other:
        await sign_in(other, team.owner.email)
        other.cookies.set("bb_notice", sealed)
        r = await other.get(groups)
        assert r.status_code == 200
        assert notices(r) == []
        assert 'bb_notice=""' in r.headers.get("set-cookie", "")  # and dropped
        # Text of one's own, with or without a signature: nothing.
        for forged in ("U2Vzc2lvbiBleHBpcmVk", f"U2Vzc2lvbiBleHBpcmVk.{'0' * 32}", "x.y.z", "é"):
            other.cookies.delete("bb_notice")
            jar = "; ".join(f"{name}={value}" for name, value in other.cookies.items())
            cookie = f"{jar}; bb_notice={forged}".encode()
            r = await other.get(groups, headers={"Cookie": cookie})
            assert r.status_code == 200, r.text
            assert notices(r) == []

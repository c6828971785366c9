"""The console's tester groups, a build's distribution and installs, and the downloads chart
(through the app itself, no browser; the browser test is test_invitation_to_install.py)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from html import unescape

import httpx
import pytest
from fastapi import FastAPI

from tests.conftest import BASE_URL
from tests.console.test_mail_pages import post, sign_in
from tests.distribution.conftest import Team, settings, smtp, team

__all__ = ["settings", "smtp", "team"]
ORIGIN = {"Origin": BASE_URL}


@pytest.fixture
async def browser(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    base = BASE_URL.replace("http://", "https://")
    async with httpx.AsyncClient(transport=transport, base_url=base) as client:
        yield client


def text(response: httpx.Response) -> str:
    return unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", response.text)))


async def test_a_developer_makes_a_group_and_adds_testers_from_the_groups_page(
    team: Team, browser: httpx.AsyncClient
) -> None:
    await team.member("tess@example.com")
    await sign_in(browser, team.owner.email)
    groups = f"/projects/{team.project['id']}/groups"

    r = await post(browser, groups, {"name": "QA"}, page=groups)
    assert r.status_code == 303, r.text
    r = await browser.get(r.headers["location"])
    assert "Group QA created." in text(r)
    group_id = re.search(r'id="(grp_\w+)"', r.text)
    assert group_id
    r = await post(
        browser,
        f"{groups}/{group_id.group(1)}/testers",
        {"emails": "tess@example.com, new@example.com"},
        page=groups,
    )
    assert r.status_code == 303, r.text
    page = text(await browser.get(r.headers["location"]))
    assert "1 tester in the group, invited new@example.com" in page
    assert "QA (1 tester)" in page
    assert "Invited, joining when they accept: new@example.com" in page
    r = await post(browser, groups, {"name": "everyone"}, page=groups)
    assert r.status_code == 409
    assert "The project has a tester group of this name" in text(r)


async def test_a_build_is_distributed_from_its_page_which_shows_who_got_it(
    team: Team, browser: httpx.AsyncClient
) -> None:
    tess = await team.member("tess@example.com")
    r = await team.client.put(
        f"/api/projects/{team.project['id']}/applications/{team.application['id']}",
        json={"autoDistributeGroups": []},
        headers=team.owner.headers,
    )
    build = await team.upload()
    await sign_in(browser, team.owner.email)
    page = f"/projects/{team.project['id']}/apps/{team.application['id']}/builds/{build['buildId']}"
    assert "Nobody has this build yet." in text(await browser.get(page))

    r = await post(browser, f"{page}/distribute", {"emails": "", "notify": "on"}, page=page)
    assert r.status_code == 422
    assert "Choose a group or enter an e-mail." in text(r)
    r = await post(browser, f"{page}/distribute", {"emails": tess.email, "notify": "on"}, page=page)
    assert r.status_code == 303, r.text
    shown = text(await browser.get(r.headers["location"]))
    assert "Distributed: 1 tester reached; 1 mailed." in shown
    assert tess.email in shown
    await team.run_jobs()
    [mail] = team.mails_to(tess.email)
    r = await team.client.get(mail.link("http://testserver/install/") + "/download")
    assert r.status_code == 302

    app_page = await browser.get(f"/projects/{team.project['id']}/apps/{team.application['id']}")
    assert "Downloads, last 30 days" in app_page.text
    assert re.search(
        r'<svg class="chart" role="img"[^>]*aria-label="[^"]*: 1 in all"', app_page.text
    )
    # A tester's view of the pages: no chart, and the build page is a tester's (the build was
    # given to her): its feedback form, none of the team's tools.
    browser.cookies.clear()
    await sign_in(browser, tess.email)
    app_page = await browser.get(f"/projects/{team.project['id']}/apps/{team.application['id']}")
    assert '<svg class="chart"' not in app_page.text
    tester_page = await browser.get(page)
    assert tester_page.status_code == 200
    assert "Send feedback" in tester_page.text
    assert '<h2 id="distribute">' not in tester_page.text
    assert f'action="{page}/distribute"' not in tester_page.text


async def test_an_admin_sets_the_groups_new_builds_go_to_and_the_link_days(
    team: Team, browser: httpx.AsyncClient
) -> None:
    qa = await team.group("QA")
    await sign_in(browser, team.owner.email)
    app_page = f"/projects/{team.project['id']}/apps/{team.application['id']}"

    r = await post(browser, f"{app_page}/distribution",
                   {"groups": qa, "installLinkDays": "3"}, page=app_page)  # fmt: skip
    assert r.status_code == 303, r.text
    r = await team.client.get(
        f"/api/projects/{team.project['id']}/applications/{team.application['id']}",
        headers=team.owner.headers,
    )
    assert (r.json()["autoDistributeGroups"], r.json()["installLinkDays"]) == ([qa], 3)

    r = await post(browser, f"{app_page}/distribution", {"installLinkDays": "365"}, page=app_page)
    assert r.status_code == 422  # the settings page, its field marked
    assert "Enter a number of days from 1 to 90." in text(r)
    assert 'aria-describedby="e-link-days"' in r.text

"""Who may send feedback, besides a signed-in tester with a token (test_feedback_submit.py):
the console's session, a personal install link's token, an app with the update key where the
application allows it; each counted against the feedback budgets."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import httpx
import pytest
from fastapi import FastAPI

from buildbay.config import Settings
from tests.conftest import BASE_URL, Account, Api, assert_problem
from tests.console.test_mail_pages import sign_in
from tests.feedback.submitting import World, form_parts, make_world, png, screenshots

pytestmark = pytest.mark.usefixtures("no_leaks")
ORIGIN = {"Origin": BASE_URL}


@pytest.fixture
async def world(api: Api, client: httpx.AsyncClient, app: FastAPI, owner: Account) -> World:
    return await make_world(api, client, app, owner)


@pytest.fixture
async def browser(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """Keeps cookies as a browser does."""
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as client:
        yield client


def install_link(token: str) -> dict[str, str]:
    return {"Authorization": f"InstallLink {token}"}


def update_key(key: str) -> dict[str, str]:
    return {"Authorization": f"UpdateKey {key}"}


# -- a personal install link --------------------------------------------------------------------


async def test_a_personal_install_link_sends_feedback_as_its_person(world: World) -> None:
    token = await world.own_link(world.tester)

    r = await world.send(install_link(token), files=screenshots(png()))

    assert r.status_code == 201, r.text
    body = r.json()
    assert body["tester"] == {"id": world.tester.user["id"], "email": world.tester.email}
    assert body["reporterEmail"] == world.tester.email


async def test_a_shared_install_link_names_nobody_and_is_refused(world: World) -> None:
    r = await world.client.post(
        f"{world.builds}/{world.build['buildId']}/install-link", headers=world.owner.headers
    )
    shared = r.json()["url"].rsplit("/", 1)[1]

    assert_problem(await world.send(install_link(shared)), 403, "install_link_not_personal")


async def test_an_install_link_works_only_for_its_own_build(world: World) -> None:
    other = await world.upload()
    token = await world.own_link(world.tester, other)
    r = await world.send(install_link(token))
    assert_problem(r, 403, "install_link_not_for_this_build")
    assert (await world.send(install_link(token), build=other)).status_code == 201


async def test_a_link_whose_person_lost_the_build_no_longer_sends(world: World) -> None:
    token = await world.own_link(world.tester)
    r = await world.client.delete(
        f"/api/projects/{world.project['id']}/members/{world.tester.user['id']}",
        headers=world.owner.headers,
    )
    assert r.status_code == 204, r.text

    assert_problem(await world.send(install_link(token)), 410, "install_link_revoked")


async def test_forged_or_unknown_install_link_tokens_are_refused(world: World) -> None:
    token = await world.own_link(world.tester)
    link_id, _, signature = token.partition(".")
    assert_problem(await world.send(install_link(f"{link_id}.{signature[::-1]}")), 404)
    assert_problem(await world.send(install_link("")), 404, "install_link_not_found")


async def test_a_reporter_email_is_refused_from_a_member(world: World) -> None:
    token = await world.own_link(world.tester)
    for who in (install_link(token), world.tester.headers):
        r = await world.send(who, {"reporterEmail": "someone.else@example.com"})
        problem = assert_problem(r, 422, "reporter_email_not_taken")
        assert problem["errors"][0]["field"] == "reporterEmail"


# -- the update key -----------------------------------------------------------------------------


async def _feedback_mode(world: World, mode: str) -> None:
    r = await world.client.put(
        f"/api/projects/{world.project['id']}/applications/{world.application['id']}",
        json={"feedbackMode": mode},
        headers=world.owner.headers,
    )
    assert r.status_code == 200, r.text


async def test_an_app_with_the_update_key_sends_feedback_where_the_application_allows(
    world: World,
) -> None:
    key = update_key(world.application["updateKey"])
    reporter = {"reporterEmail": "Beta.User@Example.com"}

    r = await world.send(key, reporter)
    assert_problem(r, 403, "feedback_from_testers_only")

    await _feedback_mode(world, "anyone-with-update-key")
    r = await world.send(key, reporter, screenshots(png()))
    assert r.status_code == 201, r.text
    body = r.json()
    assert (body["tester"], body["reporterEmail"]) == (None, "beta.user@example.com")
    assert len(body["screenshots"]) == 1

    for missing in ({}, {"reporterEmail": ""}):
        problem = assert_problem(await world.send(key, missing), 422, "validation_error")
        assert problem["errors"][0]["field"] == "reporterEmail"
    problem = assert_problem(await world.send(key, {"reporterEmail": "not an address"}), 422)
    assert problem["errors"][0]["field"] == "reporterEmail"


async def test_the_update_key_reaches_only_builds_distributed_to_everyone(
    world: World, api: Api
) -> None:
    await _feedback_mode(world, "anyone-with-update-key")
    r = await world.client.post(
        f"/api/projects/{world.project['id']}/groups",
        json={"name": "Insiders"},
        headers=world.owner.headers,
    )
    group = r.json()["id"]
    r = await world.client.put(
        f"/api/projects/{world.project['id']}/applications/{world.application['id']}",
        json={"autoDistributeGroups": [group]},
        headers=world.owner.headers,
    )
    assert r.status_code == 200, r.text
    insiders_only = await world.upload()

    r = await world.send(
        update_key(world.application["updateKey"]),
        {"reporterEmail": "beta@example.com"},
        build=insiders_only,
    )
    assert_problem(r, 403, "not_distributed")


async def test_another_application_s_or_an_unknown_update_key_is_refused(
    world: World, api: Api
) -> None:
    await _feedback_mode(world, "anyone-with-update-key")
    other = await api.application(world.owner, world.project["id"], "Other")
    reporter = {"reporterEmail": "beta@example.com"}
    r = await world.send(update_key(other["updateKey"]), reporter)
    assert_problem(r, 403, "update_key_not_for_application")
    r = await world.send(update_key("bbu_not-a-key"), reporter)
    assert_problem(r, 404, "unknown_update_key")


# -- the console's session ----------------------------------------------------------------------


async def _csrf(browser: httpx.AsyncClient) -> str:
    page = await browser.get("/projects")
    found = re.search(r'name="csrf" value="([^"]+)"', page.text) or re.search(
        r'name="csrf-token" content="([^"]+)"', page.text
    )
    assert found, page.text[:500]
    return found.group(1)


async def test_a_console_page_sends_feedback_with_its_session_and_csrf_token(
    world: World, browser: httpx.AsyncClient
) -> None:
    await sign_in(browser, world.tester.email, world.tester.password)
    token = await _csrf(browser)
    url = world.feedback_url()

    r = await browser.post(url, files=form_parts(), headers={**ORIGIN, "X-CSRF-Token": token})
    assert r.status_code == 201, r.text
    assert r.json()["tester"]["id"] == world.tester.user["id"]

    # Without the page's token (a form posted from another site): refused.
    r = await browser.post(url, files=form_parts(), headers=ORIGIN)
    assert_problem(r, 403, "csrf_failed")
    r = await browser.post(
        url,
        files=form_parts(),
        headers={"Origin": "https://evil.example", "X-CSRF-Token": token},
    )
    assert_problem(r, 403, "csrf_failed")


# -- the budgets --------------------------------------------------------------------------------


async def test_feedback_is_counted_per_reporter_and_per_address(world: World) -> None:
    settings: Settings = world.ctx.settings
    settings.feedback_per_minute_per_reporter = 2
    settings.feedback_per_minute_per_ip = 4
    for _ in range(2):
        assert (await world.send(world.tester)).status_code == 201
    r = await world.send(world.tester)
    problem = assert_problem(r, 429, "rate_limited")
    assert "feedback-reporter" in problem["detail"]
    assert int(r.headers["retry-after"]) > 0

    # Another reporter from the same address: its own budget, then the address's.
    assert (await world.send(world.developer)).status_code == 201
    r = await world.send(world.developer)
    problem = assert_problem(r, 429, "rate_limited")
    assert "feedback-ip" in problem["detail"]


async def test_what_apps_send_with_the_update_key_is_counted_per_application(
    world: World,
) -> None:
    """Each app names whatever reporter it likes, from as many addresses as it has: the
    application's own budget bounds what its key sends (and mails to the team)."""
    settings: Settings = world.ctx.settings
    settings.feedback_per_minute_per_update_key = 2
    await _feedback_mode(world, "anyone-with-update-key")
    key = update_key(world.application["updateKey"])
    for n in range(2):
        r = await world.send(key, {"reporterEmail": f"beta{n}@example.com"})
        assert r.status_code == 201, r.text
    r = await world.send(key, {"reporterEmail": "beta9@example.com"})
    problem = assert_problem(r, 429, "rate_limited")
    assert "feedback-key" in problem["detail"]
    assert int(r.headers["retry-after"]) > 0
    # Members are counted as themselves: the key's budget is not theirs.
    assert (await world.send(world.tester)).status_code == 201

"""The console's forms that invite say, in a sentence, who was not invited and why: an invite or
a resend past the address's cap, an address that blocked invitations, testers added past the
account's cap, a distribution to a blocked address (through the app itself, no browser)."""

from __future__ import annotations

import re

import httpx
import pytest

from buildbay.config import Settings
from buildbay.mail.message import ONE_CLICK
from tests.console.test_distribution_pages import browser, text
from tests.console.test_mail_pages import post, sign_in
from tests.distribution.conftest import Team, settings, smtp, team

__all__ = ["browser", "settings", "smtp", "team"]


async def block(team: Team, email: str) -> None:
    url = team.app.state.ctx.unsubscribe.address_url(email)
    r = await team.client.post(
        url, content=ONE_CLICK, headers={"Content-Type": "application/x-www-form-urlencoded"}
    )
    assert r.status_code == 200, r.text


async def test_an_invite_and_its_resends_past_the_addresses_cap_say_so_and_send_nothing(
    team: Team, browser: httpx.AsyncClient
) -> None:
    await sign_in(browser, team.owner.email)
    here = f"/projects/{team.project['id']}"
    r = await post(browser, f"{here}/invitations", {"email": "erin@example.com",
                                                    "role": "tester"}, here)  # fmt: skip
    assert r.status_code == 303, r.text
    [invitation] = re.findall(r"/invitations/(inv_\w+)/resend", (await browser.get(here)).text)
    for _ in range(2):
        r = await post(browser, f"{here}/invitations/{invitation}/resend", {}, here)
        assert r.status_code == 303, r.text

    r = await post(browser, f"{here}/invitations/{invitation}/resend", {}, here)

    assert r.status_code == 429
    assert (
        "erin@example.com was not invited: this address has had as many invitations as it "
        "takes in a day; try again tomorrow" in text(r)
    )
    r = await post(browser, f"{here}/invitations", {"email": "erin@example.com",
                                                    "role": "tester"}, here)  # fmt: skip
    assert r.status_code == 429
    assert "try again tomorrow" in text(r)
    await team.run_jobs()
    assert len(team.mails_to("erin@example.com")) == 3


async def test_an_invite_to_a_blocked_address_says_it_does_not_accept_invitations(
    team: Team, browser: httpx.AsyncClient
) -> None:
    await block(team, "erin@example.com")
    await sign_in(browser, team.owner.email)
    here = f"/projects/{team.project['id']}"

    r = await post(browser, f"{here}/invitations", {"email": "erin@example.com",
                                                    "role": "tester"}, here)  # fmt: skip

    assert r.status_code == 409
    assert (
        "erin@example.com was not invited: this address does not accept invitations from "
        "Buildbay" in text(r)
    )
    await team.run_jobs()
    assert team.smtp.messages() == []


async def test_testers_added_past_the_accounts_cap_are_named_as_not_invited(
    team: Team, browser: httpx.AsyncClient, settings: Settings
) -> None:
    settings.invitations_per_account_per_day_free = 2
    group = await team.group("QA")
    await sign_in(browser, team.owner.email)
    groups = f"/projects/{team.project['id']}/groups"

    r = await post(
        browser,
        f"{groups}/{group}/testers",
        {"emails": "a@example.com, b@example.com, c@example.com"},
        page=groups,
    )

    assert r.status_code == 303, r.text
    page = text(await browser.get(r.headers["location"]))
    assert (
        "Invited a@example.com, b@example.com; they join the group when they accept. Not "
        "invited: c@example.com (your account has sent as many invitations as its plan allows "
        "today; try again tomorrow)." in page
    )
    await team.run_jobs()
    assert sorted(r for m in team.smtp.messages() for r in m.recipients) == [
        "a@example.com",
        "b@example.com",
    ]


async def test_a_distribution_from_the_build_page_names_a_blocked_address(
    team: Team, browser: httpx.AsyncClient
) -> None:
    await block(team, "erin@example.com")
    build = await team.upload()
    await sign_in(browser, team.owner.email)
    page = f"/projects/{team.project['id']}/apps/{team.application['id']}/builds/{build['buildId']}"

    r = await post(
        browser, f"{page}/distribute",
        {"emails": "erin@example.com, new@example.com", "notify": "on"}, page=page,
    )  # fmt: skip

    assert r.status_code == 303, r.text
    shown = text(await browser.get(r.headers["location"]))
    assert (
        "Distributed: 0 testers reached, 1 invitation pending; 0 mailed. Not invited: "
        "erin@example.com (this "
        "address does not accept invitations from Buildbay)." in shown
    )


@pytest.mark.parametrize("action", ["block", "allow"])
async def test_the_unsubscribe_pages_form_blocks_and_allows_invitations(
    team: Team, action: str
) -> None:
    url = team.app.state.ctx.unsubscribe.address_url("erin@example.com")
    if action == "allow":
        await block(team, "erin@example.com")
    page = await team.client.get(url)
    button = "Allow invitations again" if action == "allow" else "Block all invitations"
    assert button in page.text

    r = await team.client.post(f"{url}/invitations", data={"action": action})

    assert r.status_code == 303
    shown = text(await team.client.get(r.headers["location"]))
    said = "can invite erin@example.com again" if action == "allow" else "any more"
    assert said in shown
    r = await team.client.post(
        f"/api/projects/{team.project['id']}/invitations",
        json={"email": "erin@example.com", "role": "tester"},
        headers=team.owner.headers,
    )
    assert r.status_code == (201 if action == "allow" else 409), r.text


async def test_the_add_member_form_says_why_an_unverified_account_was_not_added(
    team: Team, browser: httpx.AsyncClient, settings: Settings
) -> None:
    """Adding an account that never verified its address is an invitation in all but name: a
    blocked address is refused, and the adds count against the day's caps."""
    settings.invitations_per_account_per_day_free = 1
    await block(team, "victim@example.com")
    for email in ("victim@example.com", "first@example.com", "second@example.com"):
        r = await team.client.post(
            "/api/auth/register", json={"email": email, "password": "correct horse"}
        )
        assert r.status_code == 201, r.text
    await sign_in(browser, team.owner.email)
    here = f"/projects/{team.project['id']}"

    def add(email: str) -> dict[str, str]:
        return {"email": email, "role": "tester", "unverifiedOk": "on"}

    r = await post(browser, f"{here}/members", add("victim@example.com"), here)

    assert r.status_code == 409
    assert (
        "victim@example.com was not added: this address does not accept invitations from "
        "Buildbay" in text(r)
    )
    r = await post(browser, f"{here}/members", add("first@example.com"), here)
    assert (r.status_code, r.headers["location"]) == (303, f"{here}#members")
    r = await post(browser, f"{here}/members", add("second@example.com"), here)
    assert r.status_code == 429
    assert (
        "second@example.com was not added: your account has sent as many invitations as its "
        "plan allows today; try again tomorrow" in text(r)
    )
    page = (await browser.get(here)).text
    assert "first@example.com" in page
    assert "victim@example.com" not in page
    assert "second@example.com" not in page

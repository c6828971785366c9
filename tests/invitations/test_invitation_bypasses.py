"""The ways around the invitation caps and blocks an outside attack found, closed:

- throwaway accounts: three fresh, unverified free accounts each added 100 strangers to a group
  (300 invitation mails in 4 s). An account that has not verified its address sends a handful
  a day (INVITATIONS_PER_ACCOUNT_PER_DAY_UNVERIFIED), and the 429 says verifying raises it;
- members instead of invitations: register a stranger's address, add it as a member (201),
  and every upload mails the stranger a new-build mail naming the attacker's app, a block
  notwithstanding. Adding an unverified account counts against the same caps and is refused
  for a blocked address; no new-build mail goes to a blocked address, however its owner came
  to be a member.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from buildbay.config import Settings
from buildbay.mail.message import ONE_CLICK
from tests.conftest import PG_URL, Account, Api, assert_problem
from tests.invitations.test_invitation_caps import (
    FORM,
    ctx_of,
    group_of,
    invite,
    mails_in_outbox,
    owner,
    project,
    settings,
    smtp,
    verify_address,
)
from tests.smtp import SmtpSink

__all__ = ["owner", "project", "settings", "smtp"]
TRIALS = 8


async def add_member(
    client: httpx.AsyncClient, by: Account, project: dict[str, Any], email: str
) -> httpx.Response:
    return await client.post(
        f"/api/projects/{project['id']}/members",
        json={"email": email, "role": "tester"},
        headers=by.headers,
    )


async def member_emails(
    client: httpx.AsyncClient, by: Account, project: dict[str, Any]
) -> list[str]:
    r = await client.get(f"/api/projects/{project['id']}/members", headers=by.headers)
    assert r.status_code == 200, r.text
    return sorted(m["email"] for m in r.json()["members"])


async def block(client: httpx.AsyncClient, app: FastAPI, email: str) -> None:
    """The address's owner blocks mail from the one-click link of an invitation mail."""
    r = await client.post(
        ctx_of(app).unsubscribe.address_url(email), content=ONE_CLICK, headers=FORM
    )
    assert r.status_code == 200, r.text


# -- A: throwaway accounts ----------------------------------------------------------------------


async def test_unverified_accounts_each_reach_a_handful_of_strangers_and_are_told_to_verify(
    app: FastAPI, client: httpx.AsyncClient, api: Api
) -> None:
    mailed: list[str] = []
    for n in range(3):
        throwaway = await api.register(f"throwaway{n}@example.com")  # never verified
        team = await api.project(throwaway, f"Spam {n}")
        group = await group_of(client, throwaway, team)
        emails = [f"stranger{n}-{k:03}@example.com" for k in range(100)]

        r = await client.post(
            f"/api/projects/{team['id']}/groups/{group}/testers",
            json={"emails": emails},
            headers=throwaway.headers,
        )

        problem = assert_problem(r, 429, "invitation_limit")
        assert problem["invited"] == emails[:10]
        assert [x["email"] for x in problem["notInvited"]] == emails[10:]
        assert {x["reason"] for x in problem["notInvited"]} == {"unverified_account_limit"}
        assert "verify your address" in problem["detail"]
        assert problem["detail"].startswith("90 of the addresses were not invited: ")
        assert "verify your address" in problem["notInvited"][0]["detail"]
        mailed += emails[:10]
    assert sorted(await mails_in_outbox(app)) == sorted(mailed)  # 30 mails, not 300

    # Verified, the account has its plan's cap (100 a day for a free one), counted from the
    # ten already sent.
    await verify_address(app, throwaway)
    r = await client.post(
        f"/api/projects/{team['id']}/groups/{group}/testers",
        json={"emails": emails},
        headers=throwaway.headers,
    )
    assert r.status_code == 200, r.text
    assert r.json()["invited"] == emails  # the ten of before keep their invitation
    assert len(await mails_in_outbox(app)) == 30 + 90


async def test_the_unverified_cap_is_a_setting_and_never_raises_a_plans(
    app: FastAPI, client: httpx.AsyncClient, api: Api, settings: Settings
) -> None:
    settings.invitations_per_account_per_day_unverified = 2
    fresh = await api.register("fresh@example.com")
    team = await api.project(fresh, "Fresh")
    for n in range(2):
        assert (await invite(client, fresh, team, f"x{n}@example.com")).status_code == 201

    problem = assert_problem(await invite(client, fresh, team, "x2@example.com"), 429)

    assert problem["notInvited"][0]["reason"] == "unverified_account_limit"
    assert problem["detail"] == (
        "x2@example.com was not invited: your account has sent as many invitations as an "
        "account with an unverified e-mail address may today; verify your address (the link "
        "in the mail sent at sign-up) to raise the cap to your plan's; try again tomorrow"
    )
    # A plan's smaller cap stays the one that says no.
    settings.invitations_per_account_per_day_unverified = 50
    settings.invitations_per_account_per_day_free = 2
    problem = assert_problem(await invite(client, fresh, team, "x2@example.com"), 429)
    assert problem["notInvited"][0]["reason"] == "account_limit"


# -- B: members instead of invitations ----------------------------------------------------------


async def test_adding_unverified_accounts_as_members_counts_against_the_caps(
    app: FastAPI, client: httpx.AsyncClient, api: Api, owner: Account,
    project: dict[str, Any], settings: Settings,
) -> None:  # fmt: skip
    settings.invitations_per_account_per_day_free = 2
    strangers = [await api.register(f"stranger{n}@example.com") for n in range(3)]
    friend = await verify_address(app, await api.register("friend@example.com"))

    # The seed's rule holds within the caps: members are added by e-mail, verified or not.
    for stranger in strangers[:2]:
        r = await add_member(client, owner, project, stranger.email)
        assert r.status_code == 201, r.text
        assert r.json()["emailVerified"] is False
    r = await add_member(client, owner, project, strangers[2].email)

    problem = assert_problem(r, 429, "invitation_limit")
    assert problem["detail"] == (
        "stranger2@example.com was not added: your account has sent as many invitations as "
        "its plan allows today; try again tomorrow"
    )
    assert problem["invited"] == []
    assert problem["notInvited"] == [{
        "email": "stranger2@example.com", "reason": "account_limit",
        "detail": "your account has sent as many invitations as its plan allows today",
    }]  # fmt: skip
    assert int(r.headers["Retry-After"]) > 0
    # A verified account is added as before, uncounted; the adds were invitations' worth.
    assert (await add_member(client, owner, project, friend.email)).status_code == 201
    assert await member_emails(client, owner, project) == sorted(
        [owner.email, friend.email, strangers[0].email, strangers[1].email]
    )
    assert_problem(await invite(client, owner, project, "someone@example.com"), 429)
    # Adding someone twice is said as before, and counts nothing.
    assert_problem(await add_member(client, owner, project, strangers[0].email), 409,
                   "already_member")  # fmt: skip


async def test_an_address_takes_a_few_adds_and_invitations_a_day_whatever_project_asks(
    app: FastAPI, client: httpx.AsyncClient, api: Api, owner: Account, project: dict[str, Any]
) -> None:
    stranger = await api.register("stranger@example.com")
    for n in range(3):
        other = await verify_address(app, await api.register(f"other{n}@example.com"))
        elsewhere = await api.project(other, f"Elsewhere {n}")
        assert (await add_member(client, other, elsewhere, stranger.email)).status_code == 201

    problem = assert_problem(await add_member(client, owner, project, stranger.email), 429)

    assert problem["notInvited"][0]["reason"] == "recipient_limit"
    assert await member_emails(client, owner, project) == [owner.email]


async def test_a_blocked_address_cannot_be_added_as_a_member(
    app: FastAPI, client: httpx.AsyncClient, api: Api, owner: Account, project: dict[str, Any]
) -> None:
    await block(client, app, "victim@example.com")
    victim = await api.register("victim@example.com")  # by the attacker

    r = await add_member(client, owner, project, victim.email)

    problem = assert_problem(r, 409, "invitations_blocked")
    assert problem["detail"] == (
        "victim@example.com was not added: this address does not accept invitations from Buildbay"
    )
    assert problem["notInvited"] == [{
        "email": "victim@example.com", "reason": "blocked",
        "detail": "this address does not accept invitations from Buildbay",
    }]  # fmt: skip
    assert await member_emails(client, owner, project) == [owner.email]


async def test_no_new_build_mail_goes_to_a_blocked_address_whatever_made_it_a_member(
    app: FastAPI, client: httpx.AsyncClient, api: Api, owner: Account,
    project: dict[str, Any], smtp: SmtpSink,
) -> None:  # fmt: skip
    carol = await verify_address(app, await api.register("carol@example.com"))
    dave = await verify_address(app, await api.register("dave@example.com"))
    for person in (carol, dave):
        assert (await add_member(client, owner, project, person.email)).status_code == 201
    page = await client.get(ctx_of(app).unsubscribe.address_url("carol@example.com"))
    assert "It also stops every new-build e-mail to it, from any project." in page.text
    await block(client, app, "carol@example.com")  # from an invitation mail of another project
    application = await api.application(owner, project["id"], "Urgent - verify your payroll")

    build = await api.upload(owner, project["id"], application["id"])  # to everyone, mailed

    await ctx_of(app).jobs.run_until_idle()  # type: ignore[union-attr]
    assert [m.recipients for m in smtp.messages()] == [["dave@example.com"]]
    r = await client.get(
        f"/api/app-distribution/{project['id']}/{application['id']}/builds/"
        f"{build['buildId']}/installs",
        headers=owner.headers,
    )
    testers = {t["email"]: t for t in r.json()["testers"]}
    assert testers["carol@example.com"]["mailError"] == (
        "this address asked for no mail from Buildbay"
    )
    assert testers["carol@example.com"]["notifiedAt"] is None
    assert testers["dave@example.com"]["mailError"] is None
    # Carol still sees the build as a member: only the mail is withheld.
    r = await client.get(
        f"/api/app-distribution/{project['id']}/{application['id']}/builds/{build['buildId']}",
        headers=carol.headers,
    )
    assert r.status_code == 200, r.text


@pytest.mark.skipif(not PG_URL, reason="the race needs PostgreSQL")
@pytest.mark.postgres
async def test_adds_of_unverified_accounts_and_invites_at_once_all_finish(
    app: FastAPI, client: httpx.AsyncClient, api: Api, owner: Account, project: dict[str, Any]
) -> None:
    """Both take the project's row, then the counters: an add and invites of one project at
    the same moment never wait on each other in a circle (PostgreSQL would abort one)."""
    for trial in range(TRIALS):
        strangers = [await api.register(f"s{trial}-{n}@example.com") for n in range(2)]

        answers = await asyncio.gather(
            *(add_member(client, owner, project, s.email) for s in strangers),
            *(invite(client, owner, project, f"i{trial}-{n}@example.com") for n in range(2)),
        )

        assert [r.status_code for r in answers] == [201] * 4, [r.text for r in answers]
    assert len(await mails_in_outbox(app)) == 2 * TRIALS

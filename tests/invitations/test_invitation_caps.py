"""Invitation mails are capped a day per address (whatever project or account asks, resends
included), per inviting account and per project, by plan; past a cap the answer is 429 with
what was sent and what was not, and the outbox holds exactly the mails said to be sent. An
address can block every invitation from the unsubscribe link of an invitation mail, and allow
them again.

The attack these answer: a free account added 1,000 addresses to a group in one request (3,000
invitation mails in 15 s) and re-invited one address 30 times in 3 s.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from pydantic import SecretStr
from sqlalchemy import func, select, update

from buildbay.app import create_app
from buildbay.auth.cache import ACCESS_CACHE_TTL
from buildbay.auth.models import User
from buildbay.clock import FrozenClock
from buildbay.config import Plan, Settings
from buildbay.context import AppContext
from buildbay.invitations.models import Invitation
from buildbay.jobs.models import Job
from buildbay.mail.message import ONE_CLICK
from buildbay.mail.outbox import MAIL_JOB
from tests.conftest import BASE_URL, Account, Api, assert_problem
from tests.smtp import SIGN_UP_SUBJECT, SmtpSink, smtp

__all__ = ["smtp"]
FORM = {"Content-Type": "application/x-www-form-urlencoded"}


@pytest.fixture
def settings(settings: Settings, smtp: SmtpSink) -> Settings:
    settings.smtp_url = SecretStr(smtp.url)
    return settings


def ctx_of(app: FastAPI) -> AppContext:
    ctx: AppContext = app.state.ctx
    return ctx


async def mails_in_outbox(app: FastAPI) -> list[str]:
    """The recipients of every mail in the outbox (sent or not), one entry a mail; not the
    sign-ups' verification mails, which go to the accounts' own addresses."""
    async with ctx_of(app).sessions() as db:
        payloads = (await db.scalars(select(Job.payload).where(Job.kind == MAIL_JOB))).all()
    return [
        to
        for payload in payloads
        if f"Subject: {SIGN_UP_SUBJECT}" not in payload["message"]
        for to in payload["to"]
    ]


async def invitations_count(app: FastAPI) -> int:
    async with ctx_of(app).sessions() as db:
        return int(await db.scalar(select(func.count()).select_from(Invitation)) or 0)


def seconds_to_midnight(now: datetime) -> int:
    midnight = datetime.combine(now.astimezone(UTC).date() + timedelta(days=1), datetime.min.time())
    return int((midnight.replace(tzinfo=UTC) - now).total_seconds())


async def set_plan(app: FastAPI, account: Account, plan: Plan) -> None:
    async with ctx_of(app).sessions() as db, db.begin():
        await db.execute(update(User).where(User.id == account.user["id"]).values(plan=plan))


async def invite(
    client: httpx.AsyncClient, account: Account, project: dict[str, Any], email: str
) -> httpx.Response:
    return await client.post(
        f"/api/projects/{project['id']}/invitations",
        json={"email": email, "role": "tester"},
        headers=account.headers,
    )


async def group_of(client: httpx.AsyncClient, account: Account, project: dict[str, Any]) -> str:
    r = await client.post(
        f"/api/projects/{project['id']}/groups", json={"name": "QA"}, headers=account.headers
    )
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


async def verify_address(app: FastAPI, account: Account) -> Account:
    """The account as if it had followed its sign-up mail's link."""
    async with ctx_of(app).sessions() as db, db.begin():
        verified = update(User).where(User.id == account.user["id"])
        await db.execute(verified.values(email_verified_at=datetime.now(UTC)))
    return account


@pytest.fixture
async def owner(app: FastAPI, api: Api) -> Account:
    """Verified: the plans' caps are those of accounts that proved their address (an
    unverified account's are smaller, tested apart)."""
    return await verify_address(app, await api.register("owner@example.com"))


@pytest.fixture
async def project(api: Api, owner: Account) -> dict[str, Any]:
    return await api.project(owner, "Acme")


# -- the attack's cases ---------------------------------------------------------------------------


async def test_a_thousand_addresses_in_one_request_invite_a_free_accounts_day_and_refuse_the_rest(
    app: FastAPI, client: httpx.AsyncClient, api: Api, owner: Account, project: dict[str, Any],
    clock: FrozenClock,
) -> None:  # fmt: skip
    group = await group_of(client, owner, project)
    emails = [f"stranger{n:04}@example.com" for n in range(1000)]

    r = await client.post(
        f"/api/projects/{project['id']}/groups/{group}/testers",
        json={"emails": emails},
        headers=owner.headers,
    )

    problem = assert_problem(r, 429, "invitation_limit")
    assert r.headers["Retry-After"] == str(seconds_to_midnight(clock.now()))
    assert problem["invited"] == emails[:100]
    assert problem["testers"] == []
    assert [n["email"] for n in problem["notInvited"]] == emails[100:]
    assert {n["reason"] for n in problem["notInvited"]} == {"account_limit"}
    assert problem["notInvited"][0]["detail"] == (
        "your account has sent as many invitations as its plan allows today"
    )
    assert "900 of the addresses were not invited" in problem["detail"]
    # Exactly what the answer says was sent: nothing half-done.
    assert sorted(await mails_in_outbox(app)) == emails[:100]
    assert await invitations_count(app) == 100
    r = await client.get(f"/api/projects/{project['id']}/invitations", headers=owner.headers)
    assert sorted(i["email"] for i in r.json()["invitations"]) == emails[:100]

    # The same request again, at once: those invited keep their invitation (no second mail),
    # nobody else is mailed.
    r = await client.post(
        f"/api/projects/{project['id']}/groups/{group}/testers",
        json={"emails": emails},
        headers=owner.headers,
    )
    problem = assert_problem(r, 429, "invitation_limit")
    assert problem["invited"] == emails[:100]
    assert len(await mails_in_outbox(app)) == 100

    # Tomorrow, the next hundred.
    clock.advance(days=1)
    owner = await api.login(owner)
    r = await client.post(
        f"/api/projects/{project['id']}/groups/{group}/testers",
        json={"emails": emails[:200]},
        headers=owner.headers,
    )
    assert r.status_code == 200, r.text
    assert r.json()["invited"] == emails[:200]
    assert r.json()["notInvited"] == []
    assert sorted(await mails_in_outbox(app)) == emails[:200]


async def test_thirty_reinvites_of_one_address_in_three_seconds_mail_it_three_times(
    app: FastAPI, client: httpx.AsyncClient, owner: Account, project: dict[str, Any],
    clock: FrozenClock,
) -> None:  # fmt: skip
    answers = []
    for _ in range(30):
        answers.append(await invite(client, owner, project, "victim@example.com"))
        clock.advance(seconds=0.1)

    assert [r.status_code for r in answers] == [201] * 3 + [429] * 27
    for r in answers[3:]:
        problem = assert_problem(r, 429, "invitation_limit")
        assert problem["invited"] == []
        assert problem["notInvited"] == [{
            "email": "victim@example.com", "reason": "recipient_limit",
            "detail": "this address has had as many invitations as it takes in a day",
        }]  # fmt: skip
        assert int(r.headers["Retry-After"]) > 0
    assert await mails_in_outbox(app) == ["victim@example.com"] * 3
    assert await invitations_count(app) == 1


async def test_an_address_takes_a_few_invitations_a_day_whatever_project_and_account_asks(
    app: FastAPI, client: httpx.AsyncClient, api: Api, owner: Account,
    project: dict[str, Any], clock: FrozenClock,
) -> None:  # fmt: skip
    other = await api.register("other@example.com")
    elsewhere = await api.project(other, "Elsewhere")
    group = await group_of(client, other, elsewhere)

    assert (await invite(client, owner, project, "carol@example.com")).status_code == 201
    assert (await invite(client, owner, project, "Carol@Example.com")).status_code == 201
    r = await client.post(
        f"/api/projects/{elsewhere['id']}/groups/{group}/testers",
        json={"emails": ["carol@example.com", "dave@example.com"]},
        headers=other.headers,
    )
    assert r.status_code == 200, r.text
    assert r.json()["invited"] == ["carol@example.com", "dave@example.com"]

    # The fourth of the day, from either account, is refused.
    problem = assert_problem(await invite(client, other, elsewhere, "carol@example.com"), 429)
    assert problem["notInvited"][0]["reason"] == "recipient_limit"
    problem = assert_problem(await invite(client, owner, project, "carol@example.com"), 429)
    assert problem["notInvited"][0]["reason"] == "recipient_limit"
    assert sorted(await mails_in_outbox(app)) == ["carol@example.com"] * 3 + ["dave@example.com"]

    clock.advance(days=1)
    other = await api.login(other)
    assert (await invite(client, other, elsewhere, "carol@example.com")).status_code == 201


async def test_the_project_cap_holds_for_all_its_admins_and_a_paid_plan_raises_the_caps(
    app: FastAPI, client: httpx.AsyncClient, api: Api, owner: Account,
    project: dict[str, Any], settings: Settings, clock: FrozenClock,
) -> None:  # fmt: skip
    settings.invitations_per_account_per_day_free = 3
    settings.invitations_per_account_per_day_pro = 10
    settings.invitations_per_project_per_day_free = 4
    settings.invitations_per_project_per_day_pro = 10
    admin = await verify_address(app, await api.register("admin@example.com"))
    await api.add_member(owner, project["id"], admin, "admin")

    for n in range(3):
        assert (await invite(client, owner, project, f"o{n}@example.com")).status_code == 201
    problem = assert_problem(await invite(client, owner, project, "o3@example.com"), 429)
    assert problem["notInvited"][0]["reason"] == "account_limit"
    assert (await invite(client, admin, project, "a0@example.com")).status_code == 201
    problem = assert_problem(await invite(client, admin, project, "a1@example.com"), 429)
    assert problem["notInvited"][0] == {
        "email": "a1@example.com", "reason": "project_limit",
        "detail": "the project has sent as many invitations as its plan allows today",
    }  # fmt: skip

    # The owner goes pro: their account and the project they own take more.
    await set_plan(app, owner, Plan.PRO)
    clock.advance(seconds=ACCESS_CACHE_TTL.total_seconds())  # the cached token lookup expires
    for n in range(3, 6):
        assert (await invite(client, owner, project, f"o{n}@example.com")).status_code == 201
    assert len(await mails_in_outbox(app)) == 7


async def test_two_processes_share_the_counters(
    app: FastAPI, client: httpx.AsyncClient, owner: Account, project: dict[str, Any],
    settings: Settings, clock: FrozenClock,
) -> None:  # fmt: skip
    """Two app instances on one database (PostgreSQL, when the suite runs on it), invites of
    one address at the same moment through both: three mails in all."""
    second = create_app(settings, clock=clock, migrate_on_start=False)
    try:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=second), base_url=BASE_URL
        ) as other_client:
            answers = await asyncio.gather(
                *(
                    invite(c, owner, project, "shared@example.com")
                    for c in [client, other_client] * 5
                )
            )
    finally:
        await ctx_of(second).dispose()

    assert sorted(r.status_code for r in answers) == [201] * 3 + [429] * 7, [
        r.text for r in answers
    ]
    assert await mails_in_outbox(app) == ["shared@example.com"] * 3


async def test_requests_naming_the_same_addresses_in_opposite_orders_never_deadlock(
    app: FastAPI, client: httpx.AsyncClient, api: Api, owner: Account, project: dict[str, Any]
) -> None:
    """Counters are locked in one order whatever the request's: on PostgreSQL, accounts adding
    the same addresses in opposite orders at once all finish; each address is mailed three
    times in all."""
    emails = [f"shared{n}@example.com" for n in range(8)]
    teams = [(owner, project)]
    for n in range(3):
        account = await api.register(f"team{n}@example.com")
        teams.append((account, await api.project(account, f"Team {n}")))
    groups = [await group_of(client, account, p) for account, p in teams]

    answers = await asyncio.gather(
        *(
            client.post(
                f"/api/projects/{p['id']}/groups/{group}/testers",
                json={"emails": emails if n % 2 else emails[::-1]},
                headers=account.headers,
            )
            for n, ((account, p), group) in enumerate(zip(teams, groups, strict=True))
        )
    )

    assert sorted(r.status_code for r in answers) == [200] * 3 + [429], [r.text for r in answers]
    mailed = await mails_in_outbox(app)
    assert sorted(set(mailed)) == sorted(emails)
    assert all(mailed.count(email) == 3 for email in emails)


# -- distribution -------------------------------------------------------------------------------


@pytest.fixture
async def build(api: Api, owner: Account, project: dict[str, Any]) -> dict[str, Any]:
    application = await api.application(owner, project["id"])
    return await api.upload(owner, project["id"], application["id"])


def distribute_url(project: dict[str, Any], build: dict[str, Any]) -> str:
    return (
        f"/api/app-distribution/{project['id']}/{build['applicationId']}/builds/"
        f"{build['buildId']}/distribute"
    )


async def test_a_distribution_to_a_thousand_emails_reaches_those_invited_and_says_the_rest(
    app: FastAPI, client: httpx.AsyncClient, api: Api, owner: Account,
    project: dict[str, Any], build: dict[str, Any],
) -> None:  # fmt: skip
    tess = await verify_address(app, await api.register("tess@example.com"))
    await api.add_member(owner, project["id"], tess, "tester")
    emails = [f"stranger{n:04}@example.com" for n in range(999)]

    r = await client.post(
        distribute_url(project, build),
        json={"emails": [tess.email, *emails], "notify": True},
        headers=owner.headers,
    )

    problem = assert_problem(r, 429, "invitation_limit")
    # (The build went to `everyone` at verify: tess was reached then, and is mailed now.)
    assert problem["distribution"] == {
        "buildId": build["buildId"], "groups": ["everyone"], "testersReached": 0,
        "notified": 1, "invitationsPending": 100, "unsubscribed": 0,
    }  # fmt: skip
    assert problem["invited"] == emails[:100]
    assert [n["email"] for n in problem["notInvited"]] == emails[100:]
    await ctx_of(app).jobs.run_until_idle()  # type: ignore[union-attr]
    assert sorted(await mails_in_outbox(app)) == sorted([*emails[:100], tess.email])
    r = await client.get(
        distribute_url(project, build).replace("/distribute", "/installs"), headers=owner.headers
    )
    reached = sorted(t["email"] for t in r.json()["testers"] if t["userId"] is None)
    assert reached == emails[:100]  # the refused are not recipients


async def test_a_verify_whose_distribution_passes_a_cap_answers_429_with_the_build_ready(
    app: FastAPI, client: httpx.AsyncClient, api: Api, owner: Account,
    project: dict[str, Any], settings: Settings,
) -> None:  # fmt: skip
    settings.invitations_per_account_per_day_free = 2
    application = await api.application(owner, project["id"])
    builds = f"/api/app-distribution/{project['id']}/{application['id']}/builds"
    r = await client.post(
        f"{builds}/upload-link", json={"fileName": "a.apk", "fileSize": 4}, headers=owner.headers
    )
    link = r.json()
    r = await client.put(link["uploadUrl"], content=b"PK\x03\x04", headers=link["uploadHeaders"])
    assert r.status_code == 200, r.text
    emails = ["a@example.com", "b@example.com", "c@example.com"]

    r = await client.post(
        f"{builds}/verify",
        json={"buildId": link["buildId"], "distribute": {"emails": emails}},
        headers=owner.headers,
    )

    problem = assert_problem(r, 429, "invitation_limit")
    assert problem["build"] == {"id": link["buildId"], "status": "ready"}
    assert problem["distribution"]["invitationsPending"] == 2
    assert problem["invited"] == emails[:2]
    assert problem["notInvited"][0]["email"] == "c@example.com"
    r = await client.get(f"{builds}/{link['buildId']}", headers=owner.headers)
    assert r.json()["status"] == "ready"
    assert sorted(await mails_in_outbox(app)) == emails[:2]


# -- the block ----------------------------------------------------------------------------------


async def test_an_address_blocks_every_invitation_from_its_mail_and_can_allow_them_again(
    app: FastAPI, client: httpx.AsyncClient, api: Api, owner: Account,
    project: dict[str, Any], build: dict[str, Any], smtp: SmtpSink,
) -> None:  # fmt: skip
    assert (await invite(client, owner, project, "carol@example.com")).status_code == 201
    await ctx_of(app).jobs.run_until_idle()  # type: ignore[union-attr]
    [mail] = smtp.messages()
    url = mail.message["List-Unsubscribe"].strip().strip("<>")  # folded: on a line of its own
    assert url.startswith("http://testserver/unsubscribe/a.")
    assert mail.message["List-Unsubscribe-Post"] == ONE_CLICK
    assert url in mail.text

    r = await client.get(url)  # a link checker opening it blocks nothing
    assert r.status_code == 200
    assert "Block every invitation Buildbay would send carol@example.com" in r.text
    # The mail client's one-click POST (RFC 8058).
    r = await client.post(url, content=ONE_CLICK, headers=FORM)
    assert r.status_code == 200, r.text
    assert "no project on Buildbay can invite carol@example.com any more" in r.text

    # Another account's project: refused, said without more than needed, nothing sent.
    other = await api.register("other@example.com")
    elsewhere = await api.project(other, "Elsewhere")
    r = await invite(client, other, elsewhere, "carol@example.com")
    problem = assert_problem(r, 409, "invitations_blocked")
    assert problem["detail"] == (
        "carol@example.com was not invited: this address does not accept invitations from Buildbay"
    )
    assert problem["notInvited"] == [{
        "email": "carol@example.com", "reason": "blocked",
        "detail": "this address does not accept invitations from Buildbay",
    }]  # fmt: skip
    # Among others: they are invited, it is listed as not invited (no cap was reached: 200).
    group = await group_of(client, other, elsewhere)
    r = await client.post(
        f"/api/projects/{elsewhere['id']}/groups/{group}/testers",
        json={"emails": ["carol@example.com", "dave@example.com"]},
        headers=other.headers,
    )
    assert r.status_code == 200, r.text
    assert r.json()["invited"] == ["dave@example.com"]
    assert [n["reason"] for n in r.json()["notInvited"]] == ["blocked"]
    # (Carol's pending invitation into Acme stays, unmailed: erin has none.)
    erin = ctx_of(app).unsubscribe.address_url("erin@example.com")
    assert (await client.post(erin, content=ONE_CLICK, headers=FORM)).status_code == 200
    r = await client.post(
        distribute_url(project, build), json={"emails": ["erin@example.com"]},
        headers=owner.headers,
    )  # fmt: skip
    assert r.status_code == 200, r.text
    assert r.json()["testersReached"] == 0
    assert r.json()["invited"] == []
    assert r.json()["notInvited"][0]["email"] == "erin@example.com"
    assert sorted(await mails_in_outbox(app)) == ["carol@example.com", "dave@example.com"]

    # Undone from the same page.
    r = await client.post(f"{url}/invitations", data={"action": "allow"})
    assert r.status_code == 303
    r = await client.get(r.headers["location"])
    assert "projects on Buildbay can invite carol@example.com again" in r.text
    assert (await invite(client, other, elsewhere, "carol@example.com")).status_code == 201


async def test_a_member_blocks_invitations_from_a_new_build_mails_page(
    app: FastAPI, client: httpx.AsyncClient, api: Api, owner: Account, project: dict[str, Any]
) -> None:
    carol = await api.register("carol@example.com")
    url = ctx_of(app).unsubscribe.url(carol.user["id"], carol.email)

    r = await client.get(url)
    assert "Stop new-build e-mails" in r.text
    assert "Block all invitations" in r.text
    r = await client.post(f"{url}/invitations", data={"action": "block"})
    assert r.status_code == 303
    assert (
        "no project on Buildbay can invite carol@example.com"
        in (await client.get(r.headers["location"])).text
    )

    assert_problem(await invite(client, owner, project, "carol@example.com"), 409)
    assert await mails_in_outbox(app) == []


async def test_a_forged_or_altered_address_link_is_refused(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    url = ctx_of(app).unsubscribe.address_url("carol@example.com")
    forged = ctx_of(app).unsubscribe.address_url("dave@example.com").rsplit(".", 1)[0]
    mac = url.rsplit(".", 1)[1]

    for bad in (f"{forged}.{mac}", url + "x", url.replace("/a.", "/b."), f"{url[:-3]}%C3%A9"):
        r = await client.post(bad, content=ONE_CLICK, headers=FORM)
        assert r.status_code == 404, (bad, r.text)

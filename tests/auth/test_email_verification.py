"""E-mail verification: a sign-up mails a link to the address (read here from a real SMTP
server); following it, a password-reset link or an accepted invitation proves the address.
Nothing is refused to an unverified account; admins see `emailVerified` on members and testers."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from fastapi import FastAPI
from pydantic import SecretStr
from sqlalchemy import update

from buildbay.auth.models import User
from buildbay.clock import FrozenClock
from buildbay.config import Settings
from buildbay.deps import AppContext
from tests.conftest import Account, Api, assert_problem
from tests.smtp import SIGN_UP_SUBJECT, Received, SmtpSink, smtp

__all__ = ["smtp"]
CONFIRM = "/api/auth/email-verification/confirm"
RESEND = "/api/auth/email-verification"


@pytest.fixture
def settings(settings: Settings, smtp: SmtpSink) -> Settings:
    settings.smtp_url = SecretStr(smtp.url)
    return settings


async def sign_up_mails(app: FastAPI, smtp: SmtpSink, email: str) -> list[Received]:
    """Run the outbox; the verification mails that reached `email`."""
    ctx: AppContext = app.state.ctx
    assert ctx.jobs is not None
    await ctx.jobs.run_until_idle()
    return [
        m
        for m in smtp.messages(sign_ups=True)
        if m.recipients == [email] and m.message["Subject"] == SIGN_UP_SUBJECT
    ]


def token_of(mail: Received) -> str:
    link = mail.link("http")
    assert link.startswith("http://testserver/verify-email?token=bbv_"), link
    [token] = parse_qs(urlsplit(link).query)["token"]
    return token


async def verified(client: httpx.AsyncClient, account: Account) -> bool:
    r = await client.get("/api/auth/me", headers=account.headers)
    assert r.status_code == 200, r.text
    value = r.json()["emailVerified"]
    assert isinstance(value, bool)
    return value


async def test_a_sign_up_mails_a_link_that_verifies_the_address(
    client: httpx.AsyncClient, app: FastAPI, smtp: SmtpSink, api: Api
) -> None:
    ada = await api.register("ada@example.com")
    assert ada.user["emailVerified"] is False
    assert await verified(client, ada) is False

    [mail] = await sign_up_mails(app, smtp, "ada@example.com")
    assert "To confirm that it is yours, open this link within 7 days" in " ".join(
        mail.text.split()
    )
    r = await client.post(CONFIRM, json={"token": token_of(mail)})

    assert (r.status_code, r.content) == (204, b"")
    assert await verified(client, ada) is True
    r = await client.post(CONFIRM, json={"token": token_of(mail)})
    assert r.status_code == 204  # following it twice is harmless


async def test_an_unverified_account_works_as_the_seed_says(
    client: httpx.AsyncClient, api: Api, owner: Account
) -> None:
    newcomer = await api.register("newcomer@example.com")
    r = await client.post("/api/account/api-tokens", json={"name": "ci"}, headers=newcomer.headers)
    assert r.status_code == 201, r.text
    project = await api.project(owner)

    added = await api.add_member(owner, project["id"], newcomer, "tester")

    assert added["emailVerified"] is False
    r = await client.get(f"/api/projects/{project['id']}/members", headers=owner.headers)
    by_email = {m["email"]: m["emailVerified"] for m in r.json()["members"]}
    assert by_email == {"owner@example.com": False, "newcomer@example.com": False}
    r = await client.get(
        f"/api/projects/{project['id']}/groups/everyone/testers", headers=owner.headers
    )
    assert r.status_code == 200, r.text
    assert {t["email"]: t["emailVerified"] for t in r.json()["testers"]} == by_email


@pytest.mark.parametrize(
    "spoil",
    [
        lambda t: t[:-1] + ("A" if t[-1] != "A" else "B"),  # the signature
        lambda t: t.replace(".", ".9", 1),  # the expiry
        lambda t: "bbv_usr_00000000000000000000000000" + t[34:],  # the user
        lambda t: t + "é",
        lambda t: "not even a token",
    ],
)
async def test_a_link_this_server_did_not_make_is_refused(
    client: httpx.AsyncClient, app: FastAPI, smtp: SmtpSink, api: Api, spoil: object
) -> None:
    ada = await api.register("ada@example.com")
    [mail] = await sign_up_mails(app, smtp, "ada@example.com")
    assert callable(spoil)

    r = await client.post(CONFIRM, json={"token": spoil(token_of(mail))})

    problem = assert_problem(r, 422, "invalid_token")
    assert problem["errors"][0]["field"] == "token"
    assert await verified(client, ada) is False


async def test_a_link_lasts_seven_days_and_only_for_the_address_it_was_sent_to(
    client: httpx.AsyncClient, app: FastAPI, smtp: SmtpSink, api: Api, clock: FrozenClock
) -> None:
    ada = await api.register("ada@example.com")
    bob = await api.register("bob@example.com")
    [late] = await sign_up_mails(app, smtp, "ada@example.com")
    [moved] = await sign_up_mails(app, smtp, "bob@example.com")
    ctx: AppContext = app.state.ctx
    async with ctx.sessions() as db, db.begin():
        await db.execute(
            update(User).where(User.id == bob.user["id"]).values(email="robert@example.com")
        )
    clock.advance(days=7)

    assert_problem(await client.post(CONFIRM, json={"token": token_of(late)}), 422, "invalid_token")
    clock.advance(days=-6)
    r = await client.post(CONFIRM, json={"token": token_of(moved)})
    assert_problem(r, 422, "invalid_token")
    assert await verified(client, await api.login(ada)) is False


async def test_a_new_mail_can_be_asked_for_a_few_times_an_hour_until_verified(
    client: httpx.AsyncClient, app: FastAPI, smtp: SmtpSink, api: Api, settings: Settings
) -> None:
    settings.verification_mails_per_address_per_day = 10  # the hour's limit, not the day's
    ada = await api.register("ada@example.com")
    for _ in range(5):
        r = await client.post(RESEND, headers=ada.headers)
        assert (r.status_code, r.content) == (202, b"")

    r = await client.post(RESEND, headers=ada.headers)

    problem = assert_problem(r, 429, "verification_throttled")
    assert "wait" in problem["detail"]
    assert 1 <= int(r.headers["Retry-After"]) <= 3600
    mails = await sign_up_mails(app, smtp, "ada@example.com")
    assert len(mails) == 6  # the sign-up's and five more, each a link that works
    r = await client.post(CONFIRM, json={"token": token_of(mails[-1])})
    assert r.status_code == 204, r.text
    assert await verified(client, ada) is True
    r = await client.post(RESEND, headers=ada.headers)
    assert_problem(r, 409, "email_already_verified")


LURE = "Security team: your account is locked, call +1 555 0100 or visit evil.example/reset"


async def test_the_mail_to_an_unproven_address_carries_no_text_the_sign_up_typed(
    client: httpx.AsyncClient, app: FastAPI, smtp: SmtpSink
) -> None:
    """An attacker signs up with a stranger's address and a name that reads as a warning: the
    stranger's mail greets them generically and says nothing the attacker wrote."""
    r = await client.post("/api/auth/register", json={
        "email": "victim@example.com", "password": "correct horse", "name": LURE,
    })  # fmt: skip
    assert r.status_code == 201, r.text

    [mail] = await sign_up_mails(app, smtp, "victim@example.com")

    assert mail.text.splitlines()[0] == "Hello,"
    for part in (mail.text, mail.html, str(mail.message)):
        assert "Security team" not in part
        assert "evil.example" not in part
    assert "<p>Hello,</p>" in mail.html


async def test_at_most_three_more_verification_mails_a_day_reach_an_address(
    client: httpx.AsyncClient, app: FastAPI, smtp: SmtpSink, api: Api, clock: FrozenClock
) -> None:
    # The day's limit is a UTC day's: a run late in the evening starts at the next day's
    # first hour, so that the two hours below stay in one day.
    if clock.now().hour >= 21:
        clock.advance(hours=24 - clock.now().hour)
    victim = await api.register("victim@example.com")
    for _ in range(3):
        r = await client.post(RESEND, headers=victim.headers)
        assert (r.status_code, r.content) == (202, b"")

    clock.advance(hours=2)  # past the hour's limit: the day's holds
    r = await client.post(RESEND, headers=victim.headers)

    problem = assert_problem(r, 429, "verification_throttled")
    assert problem["detail"] == (
        "This address has been sent as many verification mails as it takes in a day (3); use "
        "the link of one of them, or ask again tomorrow"
    )
    now = clock.now()
    midnight = datetime.combine(now.date() + timedelta(days=1), datetime.min.time(), UTC)
    assert int(r.headers["Retry-After"]) == int((midnight - now).total_seconds())
    assert len(await sign_up_mails(app, smtp, "victim@example.com")) == 4  # the sign-up's + 3
    # The next day, one more; the mails of the day before still work.
    clock.advance(days=1)
    victim = await api.login(victim)
    r = await client.post(RESEND, headers=victim.headers)
    assert r.status_code == 202, r.text
    mails = await sign_up_mails(app, smtp, "victim@example.com")
    assert len(mails) == 5
    assert (await client.post(CONFIRM, json={"token": token_of(mails[1])})).status_code == 204


async def test_an_api_token_cannot_ask_for_a_verification_mail(
    client: httpx.AsyncClient, owner: Account
) -> None:
    r = await client.post("/api/account/api-tokens", json={"name": "ci"}, headers=owner.headers)
    token = {"Authorization": f"Bearer {r.json()['token']}"}

    r = await client.post(RESEND, headers=token)

    assert_problem(r, 403, "interactive_session_required")


async def test_accepting_an_invitation_mailed_to_the_address_verifies_it(
    client: httpx.AsyncClient, app: FastAPI, smtp: SmtpSink, api: Api, owner: Account
) -> None:
    project = await api.project(owner)
    r = await client.post(
        f"/api/projects/{project['id']}/invitations",
        json={"email": "erin@example.com", "role": "developer"},
        headers=owner.headers,
    )
    assert r.status_code == 201, r.text
    erin = await api.register("erin@example.com")
    ctx: AppContext = app.state.ctx
    assert ctx.jobs is not None
    await ctx.jobs.run_until_idle()
    [invitation] = [m for m in smtp.messages() if m.recipients == ["erin@example.com"]]
    token = invitation.link("http").rsplit("/", 1)[1]
    assert await verified(client, erin) is False

    r = await client.post("/api/invitations/accept", json={"token": token}, headers=erin.headers)

    assert r.status_code == 200, r.text
    assert r.json()["emailVerified"] is True
    assert await verified(client, erin) is True

"""An account claimed before its owner arrives (issue 34): someone signs up with a newcomer's
address, makes an API token and signs in to the console; the real person resets the password
from the mail, and every credential the first one made stops working. Through the app, a real
SMTP server and the link read from the mail."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from fastapi import FastAPI
from pydantic import SecretStr

from buildbay.config import Settings, SignupMode
from buildbay.deps import AppContext
from tests.conftest import BASE_URL, Account, Api, assert_problem
from tests.smtp import SmtpSink, smtp

__all__ = ["smtp"]
NEWHIRE = "newhire@corp.example"
ORIGIN = {"Origin": BASE_URL}


@pytest.fixture
def settings(settings: Settings, smtp: SmtpSink) -> Settings:
    settings.smtp_url = SecretStr(smtp.url)
    return settings


@pytest.fixture
async def browser(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """The attacker's browser: keeps the console's cookies (Secure, hence https)."""
    transport = httpx.ASGITransport(app=app)
    base = BASE_URL.replace("http://", "https://")
    async with httpx.AsyncClient(transport=transport, base_url=base) as client:
        yield client


async def run_outbox(app: FastAPI) -> None:
    ctx: AppContext = app.state.ctx
    assert ctx.jobs is not None
    await ctx.jobs.run_until_idle()


async def console_sign_in(browser: httpx.AsyncClient, email: str, password: str) -> None:
    page = await browser.get("/login")
    csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert csrf is not None
    form = {"csrf": csrf.group(1), "email": email, "password": password}
    r = await browser.post("/login", data=form, headers=ORIGIN)
    assert (r.status_code, r.headers["location"]) == (303, "/projects"), r.text


async def reset_by_mail(
    client: httpx.AsyncClient, app: FastAPI, smtp: SmtpSink, email: str, password: str
) -> None:
    """What the real person does: ask for a reset, open the mailed link, choose a password."""
    await run_outbox(app)
    before = len(smtp.messages())
    r = await client.post("/api/auth/password-reset", json={"email": email})
    assert r.status_code == 202, r.text
    await run_outbox(app)
    [mail] = smtp.messages()[before:]
    assert mail.recipients == [email]
    assert "deletes all its API tokens" in " ".join(mail.text.split())
    [token] = parse_qs(urlsplit(mail.link("http")).query)["token"]
    r = await client.post(
        "/api/auth/password-reset/confirm", json={"token": token, "password": password}
    )
    assert r.status_code == 204, r.text


async def claim(
    client: httpx.AsyncClient, browser: httpx.AsyncClient, api: Api
) -> tuple[Account, dict[str, str]]:
    """The attacker: signs up with the newcomer's address, makes an API token and signs in to
    the console."""
    attacker = await api.register(NEWHIRE, "attacker's password")
    assert attacker.user["emailVerified"] is False
    r = await client.post(
        "/api/account/api-tokens", json={"name": "mine"}, headers=attacker.headers
    )
    assert r.status_code == 201, r.text
    token = {"Authorization": f"Bearer {r.json()['token']}"}
    await console_sign_in(browser, NEWHIRE, "attacker's password")
    assert (await browser.get("/projects")).status_code == 200
    return attacker, token


async def assert_locked_out(
    client: httpx.AsyncClient, browser: httpx.AsyncClient, attacker: Account,
    api_token: dict[str, str], project_id: str,
) -> None:  # fmt: skip
    r = await client.get(f"/api/projects/{project_id}", headers=api_token)
    assert_problem(r, 401, "invalid_token")
    r = await client.get("/api/auth/me", headers=api_token)
    assert_problem(r, 401, "invalid_token")
    r = await client.get(f"/api/projects/{project_id}", headers=attacker.headers)
    assert_problem(r, 401, "token_revoked")
    r = await client.post("/api/auth/refresh-token", json={"refresh_token": attacker.refresh_token})
    assert_problem(r, 401, "session_ended")
    r = await browser.get(f"/projects/{project_id}")
    assert r.status_code == 303, r.text
    assert r.headers["location"].startswith("/login")
    r = await client.post(
        "/api/auth/login", json={"email": NEWHIRE, "password": "attacker's password"}
    )
    assert_problem(r, 401, "invalid_credentials")


async def test_a_reset_takes_a_claimed_account_back_from_every_credential_of_the_claimer(
    client: httpx.AsyncClient, browser: httpx.AsyncClient, app: FastAPI, smtp: SmtpSink,
    api: Api, owner: Account,
) -> None:  # fmt: skip
    attacker, api_token = await claim(client, browser, api)

    await reset_by_mail(client, app, smtp, NEWHIRE, "the newcomer's own password")
    project = await api.project(owner, "Payroll")
    newhire = Account(NEWHIRE, "the newcomer's own password", "", "", {})
    newhire = await api.login(newhire)
    await api.add_member(owner, project["id"], newhire, "developer")

    await assert_locked_out(client, browser, attacker, api_token, project["id"])
    r = await client.get(f"/api/projects/{project['id']}", headers=newhire.headers)
    assert r.status_code == 200, r.text
    assert r.json()["name"] == "Payroll"
    r = await client.get("/api/auth/me", headers=newhire.headers)
    assert (r.status_code, r.json()["emailVerified"]) == (200, True)  # the link proved it
    r = await client.get("/api/account/api-tokens", headers=newhire.headers)
    assert r.json() == {"apiTokens": []}
    r = await client.get(f"/api/projects/{project['id']}/members", headers=owner.headers)
    [member] = [m for m in r.json()["members"] if m["email"] == NEWHIRE]
    assert member["emailVerified"] is True


async def test_the_takeover_holds_under_invite_only_sign_up(
    client: httpx.AsyncClient, browser: httpx.AsyncClient, app: FastAPI, smtp: SmtpSink,
    api: Api, owner: Account,
) -> None:  # fmt: skip
    # The company invites the newcomer; the attacker, who read the address somewhere, signs up
    # with it before they do (invite-only checks the address is invited, not whose it is).
    ctx: AppContext = app.state.ctx
    ctx.settings.signup = SignupMode.INVITE_ONLY
    project = await api.project(owner, "Payroll")
    r = await client.post(
        f"/api/projects/{project['id']}/invitations",
        json={"email": NEWHIRE, "role": "developer"},
        headers=owner.headers,
    )
    assert r.status_code == 201, r.text
    attacker, api_token = await claim(client, browser, api)

    await reset_by_mail(client, app, smtp, NEWHIRE, "the newcomer's own password")

    await assert_locked_out(client, browser, attacker, api_token, project["id"])
    newhire = await api.login(Account(NEWHIRE, "the newcomer's own password", "", "", {}))
    r = await client.get("/api/auth/me", headers=newhire.headers)
    assert (r.status_code, r.json()["emailVerified"]) == (200, True)

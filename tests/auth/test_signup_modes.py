"""BUILDBAY_SIGNUP: who may create an account. open (the default) lets anyone; invite-only only
an e-mail a project has a live invitation for; closed nobody (the operator creates accounts).
The API and the console's pages say the same."""

from __future__ import annotations

import re

import httpx
from fastapi import FastAPI

from buildbay.app import create_app
from buildbay.auth.dependencies import account_service
from buildbay.clock import FrozenClock
from buildbay.config import Settings, SignupMode
from tests.conftest import BASE_URL, assert_problem

NEW = {"email": "new@example.com", "password": "correct horse"}


def with_signup(settings: Settings, mode: SignupMode) -> Settings:
    return settings.model_copy(update={"signup": mode})


async def _owner_headers(app: FastAPI, client: httpx.AsyncClient) -> dict[str, str]:
    """An account made as the operator makes them (whatever the sign-up mode), logged in."""
    ctx = app.state.ctx
    async with ctx.sessions() as db, db.begin():
        accounts = account_service(ctx, db)
        await accounts.create_account("lead@example.com", "correct horse", "Lea")
    r = await client.post(
        "/api/auth/login", json={"email": "lead@example.com", "password": "correct horse"}
    )
    assert r.status_code == 200, r.text
    return {"Authorization": f"Bearer {r.json()['access_token']}"}


async def test_closed_refuses_every_sign_up(settings: Settings, clock: FrozenClock) -> None:
    app = create_app(with_signup(settings, SignupMode.CLOSED), clock=clock)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as client:
            r = await client.post("/api/auth/register", json=NEW)
            body = assert_problem(r, 403, "signup_closed")
            assert body["detail"] == (
                "Sign-up is closed on this server: ask its operator for an account"
            )
            page = await client.get("/signup")
            assert "Sign-up is closed on this server" in page.text
            assert 'action="/signup"' not in page.text  # no form to fill in for nothing
            login = await client.get("/login")
            assert 'href="/signup' not in login.text
            assert "Ask the operator of this server for an account" in login.text


async def test_invite_only_takes_the_invited_e_mail_while_its_invitation_lives(
    settings: Settings, clock: FrozenClock
) -> None:
    app = create_app(with_signup(settings, SignupMode.INVITE_ONLY), clock=clock)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as client:
            r = await client.post("/api/auth/register", json=NEW)
            assert_problem(r, 403, "invitation_required")
            page = await client.get("/signup")
            assert "This server takes new accounts by invitation" in page.text
            assert 'action="/signup"' in page.text  # the invited still sign up here

            lead = await _owner_headers(app, client)
            r = await client.post("/api/projects", json={"name": "Acme"}, headers=lead)
            project = r.json()["id"]
            for email in ("new@example.com", "late@example.com"):
                r = await client.post(
                    f"/api/projects/{project}/invitations",
                    json={"email": email, "role": "tester"},
                    headers=lead,
                )
                assert r.status_code == 201, r.text
            r = await client.post("/api/auth/register", json={**NEW, "email": "NEW@example.com"})
            assert r.status_code == 201, r.text  # the invited address, in any case

            clock.advance(days=8)  # invitations live 7 days
            r = await client.post("/api/auth/register", json={**NEW, "email": "late@example.com"})
            assert_problem(r, 403, "invitation_required")


async def test_open_is_the_default(client: httpx.AsyncClient, settings: Settings) -> None:
    assert settings.signup is SignupMode.OPEN
    r = await client.post("/api/auth/register", json=NEW)
    assert r.status_code == 201, r.text
    page = await client.get("/signup")
    assert not re.search("takes new accounts by invitation|Sign-up is closed", page.text)

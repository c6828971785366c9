"""BUILDBAY_OIDC_ONLY: password sign-in, sign-up and reset off but for the break-glass
operators; the API says so in a problem, the console in a sentence; API tokens keep working."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import select

from buildbay.app import create_app
from buildbay.auth.password_reset import PASSWORD_RESET_JOB
from buildbay.clock import FrozenClock
from buildbay.config import ConfigurationError, Settings
from buildbay.jobs.models import Job
from tests.conftest import BASE_URL, Api, assert_problem
from tests.oidc_provider import OidcProvider
from tests.sso.conftest import open_browser, sso_settings

pytestmark = pytest.mark.slow

OPERATOR = "ops@example.com"


@pytest.fixture
async def sso_only(
    settings: Settings, provider: OidcProvider, clock: FrozenClock
) -> AsyncIterator[FastAPI]:
    """The same database as `client`'s app, served by an app that is SSO-only."""
    only = sso_settings(
        settings, provider, oidc_only=True,
        oidc_break_glass=" OPS@example.com ,ops2@example.com",
    )  # fmt: skip
    app = create_app(only, clock=clock, migrate_on_start=False)
    yield app
    await app.state.ctx.dispose()


@pytest.fixture
async def only_client(sso_only: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=sso_only)
    async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as c:
        yield c


async def test_the_api_refuses_passwords_with_a_problem_that_says_sso_only(
    api: Api, only_client: httpx.AsyncClient
) -> None:
    member = await api.register("member@example.com")  # before the server became SSO-only
    r = await api.client.post(
        "/api/account/api-tokens", json={"name": "ci"}, headers=member.headers
    )
    assert r.status_code == 201, r.text
    token = r.json()["token"]

    login = {"email": member.email, "password": member.password}
    body = assert_problem(await only_client.post("/api/auth/login", json=login), 403, "sso_only")
    assert body["type"] == "/problems/sso-only"
    assert "sign in with Acme ID (single sign-on only)" in body["detail"]
    new = {"email": "new@example.com", "password": "correct horse"}
    assert_problem(await only_client.post("/api/auth/register", json=new), 403, "sso_only")
    reset = {"email": member.email}
    assert_problem(await only_client.post("/api/auth/password-reset", json=reset), 403, "sso_only")
    # What was given before keeps working: the API token, the session's access token.
    me = await only_client.get("/api/auth/me", headers={"Authorization": f"Bearer {token}"})
    assert me.status_code == 200
    assert me.json()["email"] == member.email
    assert (await only_client.get("/api/auth/me", headers=member.headers)).status_code == 200


async def test_an_api_token_refused_the_account_is_told_to_sign_in_with_the_provider(
    api: Api, only_client: httpx.AsyncClient
) -> None:
    member = await api.register("member@example.com")
    r = await api.client.post(
        "/api/account/api-tokens", json={"name": "ci"}, headers=member.headers
    )
    bearer = {"Authorization": f"Bearer {r.json()['token']}"}

    r = await only_client.post("/api/account/api-tokens", json={"name": "more"}, headers=bearer)

    body = assert_problem(r, 403, "interactive_session_required")
    assert body["detail"] == (
        "API tokens cannot manage the account: sign in with Acme ID in the web console and do "
        "this there"
    )
    # Where passwords sign in, the sentence says so.
    r = await api.client.post("/api/account/api-tokens", json={"name": "more"}, headers=bearer)
    assert "log in with your e-mail and password" in r.json()["detail"]


async def test_a_break_glass_operator_still_signs_in_and_resets_with_a_password(
    api: Api, only_client: httpx.AsyncClient, sso_only: FastAPI
) -> None:
    await api.register(OPERATOR)  # the operator's account (`buildbay users create`)
    r = await only_client.post(
        "/api/auth/login", json={"email": "Ops@Example.com ", "password": "correct horse"}
    )
    assert r.status_code == 200, r.text
    r = await only_client.post("/api/auth/password-reset", json={"email": OPERATOR})
    # Answered as every address is (below), but the operator's link is mailed.
    assert_problem(r, 403, "sso_only")
    assert await reset_jobs(sso_only) == [OPERATOR]


async def reset_jobs(app: FastAPI) -> list[str]:
    """The addresses password-reset mails were asked for."""
    async with app.state.ctx.sessions() as db:
        jobs = await db.scalars(select(Job).where(Job.kind == PASSWORD_RESET_JOB))
        return [job.payload["email"] for job in jobs]


def _same(r: httpx.Response) -> tuple[int, dict[str, object]]:
    """The answer but its request id."""
    body = r.json()
    body.pop("requestId", None)
    return r.status_code, body


async def test_a_password_sign_in_tells_no_break_glass_address_from_another(
    api: Api, only_client: httpx.AsyncClient, sso_only: FastAPI
) -> None:
    await api.register(OPERATOR)
    await api.register("member@example.com")
    tries = [
        (OPERATOR, "a wrong password"),  # a break-glass address, its password mistyped
        ("member@example.com", "a wrong password"),
        ("member@example.com", "correct horse"),  # its right password: off all the same
        ("nobody@example.com", "correct horse"),  # no account
    ]
    answers = [
        _same(await only_client.post("/api/auth/login", json={"email": e, "password": p}))
        for e, p in tries
    ]

    assert answers == [answers[0]] * len(tries)
    status, body = answers[0]
    assert (status, body["code"]) == (403, "sso_only")
    assert body["detail"] == (
        "Password sign-in is off on this server: sign in with Acme ID (single sign-on only). "
        "API tokens keep working. Only the operator's break-glass accounts sign in with a "
        "password, with the right one"
    )
    # The same for a reset asked for, and for a sign-up, whatever the address.
    resets = [
        _same(await only_client.post("/api/auth/password-reset", json={"email": e}))
        for e in (OPERATOR, "member@example.com", "nobody@example.com")
    ]
    assert resets == [resets[0]] * 3
    assert resets[0][1]["code"] == "sso_only"
    assert await reset_jobs(sso_only) == [OPERATOR]
    sign_ups = [
        _same(
            await only_client.post(
                "/api/auth/register", json={"email": e, "password": "correct horse"}
            )
        )
        for e in ("ops2@example.com", "new@example.com")
    ]
    assert sign_ups[0] == sign_ups[1]
    assert sign_ups[0][1]["code"] == "sso_only"


async def test_a_break_glass_address_without_an_account_cannot_sign_up(
    only_client: httpx.AsyncClient,
) -> None:
    # Sign-up is off for everyone here: the operator makes break-glass accounts.
    r = await only_client.post(
        "/api/auth/register", json={"email": OPERATOR, "password": "correct horse"}
    )
    assert_problem(r, 403, "sso_only")
    r = await only_client.post(
        "/api/auth/login", json={"email": OPERATOR, "password": "correct horse"}
    )
    assert_problem(r, 403, "sso_only")


async def test_the_console_offers_the_provider_in_place_of_the_password_forms(
    sso_only: FastAPI, provider: OidcProvider, api: Api
) -> None:
    await api.register("member@example.com")
    async with open_browser(sso_only, provider) as browser:
        login = await browser.page("/login")
        assert 'id="sso-only"' in login.text
        assert "Sign in with Acme ID" in login.text
        assert 'name="password"' not in login.text
        signup = await browser.page("/signup")
        assert 'name="password"' not in signup.text
        assert "Sign-up with a password is off" in signup.text
        forgot = await browser.page("/forgot-password")
        assert "there is no password to reset here" in forgot.text
        # The break-glass form, for the operator; anyone else is told why not.
        glass = await browser.page("/login?break_glass=1")
        assert 'name="password"' in glass.text
        csrf = glass.text.split('name="csrf" value="', 1)[1].split('"', 1)[0]
        refused = await browser.client.post(
            "/login",
            data={"csrf": csrf, "email": "member@example.com", "password": "correct horse"},
            headers={"accept": "text/html"},
        )
        assert refused.status_code == 403
        assert "Password sign-in is off on this server: sign in with Acme ID" in refused.text
        # And the provider signs them in: their address was never verified here, and password
        # sign-in and reset are off, so the provider's verified address is what proves it.
        provider.set_user("member-1", email="member@example.com", email_verified=True)
        assert (await browser.sign_in("member-1")).headers["location"] == "/projects"
        assert "member@example.com" in (await browser.page("/account")).text


def test_oidc_only_without_a_provider_is_refused_at_start(settings: Settings) -> None:
    with pytest.raises(ConfigurationError, match="BUILDBAY_OIDC_ONLY=true needs"):
        Settings(**(settings.model_dump() | {"oidc_only": True, "oidc_issuer": None}))


def test_an_issuer_in_clear_is_refused_in_production(settings: Settings) -> None:
    production = settings.model_dump() | {"env": "production", "oidc_client_id": "x"}
    with pytest.raises(ConfigurationError, match="https:// issuer"):
        Settings(**(production | {"oidc_issuer": "http://id.example.com"}))
    assert Settings(**(production | {"oidc_issuer": "https://id.example.com/realms/a"}))
    assert Settings(**(production | {"oidc_issuer": "http://127.0.0.1:8080"}))
    with pytest.raises(ConfigurationError, match="needs BUILDBAY_OIDC_CLIENT_ID"):
        Settings(**(production | {"oidc_issuer": "https://id.example.com", "oidc_client_id": ""}))

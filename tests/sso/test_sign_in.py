"""Signing in to the console through a real OpenID provider process (issue 41)."""

from __future__ import annotations

import asyncio
import base64
import hashlib
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import select, update

from buildbay.app import create_app
from buildbay.auth.models import User
from buildbay.clock import FrozenClock
from buildbay.config import Settings
from buildbay.console.sso import _Flow, _FlowCookie
from buildbay.sso.discovery import REFETCH_FLOOR
from buildbay.sso.models import SsoIdentity
from buildbay.sso.provider import FlowSecrets, SignInFailed
from tests.conftest import Account, Api
from tests.oidc_provider import OidcProvider, oidc_provider_process
from tests.processes import free_port
from tests.sso.conftest import CLIENT_ID, Browser, audit_entries, open_browser, sso_settings

pytestmark = pytest.mark.slow


async def _user(app: FastAPI, email: str) -> User | None:
    async with app.state.ctx.sessions() as db:
        found: User | None = await db.scalar(select(User).where(User.email == email))
        return found


async def test_a_first_sign_in_makes_the_account_and_signs_the_browser_in(
    app: FastAPI, browser: Browser, provider: OidcProvider
) -> None:
    provider.set_user("ada-1", email="Ada@Example.com", email_verified=True, name="Ada Lovelace")
    url = await browser.start("/projects?from=sso")
    query = parse_qs(urlsplit(url).query)
    assert query["client_id"] == [CLIENT_ID]
    assert query["code_challenge_method"] == ["S256"]
    assert len(query["code_challenge"][0]) == 43
    assert query["nonce"][0]
    assert query["state"][0]
    assert query["redirect_uri"] == ["http://testserver/auth/sso/callback"]
    # PKCE: the challenge is S256 of the verifier this browser's flow cookie keeps.
    cookie = _FlowCookie(app.state.ctx.settings.signing_key, secure=False)
    flow = cookie.unseal(
        browser.client.cookies[cookie.name], int(app.state.ctx.clock.now().timestamp())
    )
    assert flow is not None
    digest = hashlib.sha256(flow.secrets.code_verifier.encode()).digest()
    assert query["code_challenge"] == [base64.urlsafe_b64encode(digest).rstrip(b"=").decode()]
    assert query["nonce"] == [flow.secrets.nonce]
    done = await browser.callback(await browser.at_provider(url, "ada-1"))
    assert done.headers["location"] == "/projects?from=sso"

    projects = await browser.page("/account")
    assert projects.status_code == 200
    assert "ada@example.com" in projects.text
    user = await _user(app, "ada@example.com")
    assert user is not None
    assert user.name == "Ada Lovelace"
    assert user.email_verified
    signed_in = await audit_entries(app, "auth.sign_in")
    assert [(e.actor_id, e.details) for e in signed_in] == [
        (user.id, {"method": "sso", "created": True, "linked": False})
    ]
    # The account has no password: none signs in with it.
    r = await browser.client.post(
        "/api/auth/login", json={"email": "ada@example.com", "password": "!sso"}
    )
    assert r.status_code == 401


async def test_a_later_sign_in_finds_the_account_by_subject_whatever_the_address_becomes(
    app: FastAPI, browser: Browser, provider: OidcProvider
) -> None:
    provider.set_user("bob-1", email="bob@example.com", email_verified=True)
    await browser.sign_in("bob-1")
    provider.set_user("bob-1", email="robert@example.com", email_verified=True)
    async with open_browser(app, provider) as other:
        await other.sign_in("bob-1")
        assert "bob@example.com" in (await other.page("/account")).text
    assert await _user(app, "robert@example.com") is None


async def test_a_verified_password_account_is_linked_as_it_is(
    app: FastAPI, browser: Browser, provider: OidcProvider, api: Api
) -> None:
    verified = await api.register("carol@example.com")
    async with app.state.ctx.sessions() as db:
        await db.execute(
            update(User)
            .where(User.email == verified.email)
            .values(email_verified_at=User.created_at)
        )
        await db.commit()

    provider.set_user("carol-1", email="carol@example.com", email_verified=True)
    assert (await browser.sign_in("carol-1")).headers["location"] == "/projects"
    async with app.state.ctx.sessions() as db:
        link = await db.get(SsoIdentity, (provider.issuer, "carol-1"))
        assert link is not None
        assert link.user_id == verified.user["id"]
    # Nothing of the owner's ends: they proved the address here before.
    assert (await api.client.get("/api/auth/me", headers=verified.headers)).status_code == 200
    assert await audit_entries(app, "auth.account_taken_back") == []


async def unverified_account_with_every_credential(api: Api) -> tuple[Account, str]:
    """A password account that never verified its address (a squatter's, perhaps), with a
    login and an API token."""
    squatted = await api.register("dave@example.com")
    r = await api.client.post(
        "/api/account/api-tokens", json={"name": "ci"}, headers=squatted.headers
    )
    assert r.status_code == 201, r.text
    return squatted, r.json()["token"]


async def assert_taken_back(app: FastAPI, api: Api, squatted: Account, api_token: str) -> None:
    """Every credential made before the provider's sign-in ends, as a reset ends them."""
    client = api.client
    assert (await client.get("/api/auth/me", headers=squatted.headers)).status_code == 401
    bearer = {"Authorization": f"Bearer {api_token}"}
    assert (await client.get("/api/auth/me", headers=bearer)).status_code == 401
    r = await client.post("/api/auth/refresh-token", json={"refresh_token": squatted.refresh_token})
    assert r.status_code == 401, r.text
    r = await client.post(
        "/api/auth/login", json={"email": squatted.email, "password": squatted.password}
    )
    assert r.status_code in (401, 403), r.text  # the old password is gone too
    user = await _user(app, squatted.email)
    assert user is not None
    assert user.email_verified
    taken = await audit_entries(app, "auth.account_taken_back")
    assert [(e.actor_id, e.subject_user_id, e.details) for e in taken] == [
        (user.id, user.id, {"method": "sso", "provider": "Acme ID"})
    ]


async def test_an_unverified_account_is_linked_once_its_old_credentials_end(
    app: FastAPI, browser: Browser, provider: OidcProvider, api: Api
) -> None:
    squatted, api_token = await unverified_account_with_every_credential(api)

    provider.set_user("dave-1", email="dave@example.com", email_verified=True)
    assert (await browser.sign_in("dave-1")).headers["location"] == "/projects"

    # The provider's person is signed in to the account, and nobody else is.
    account = await browser.page("/account")
    assert account.status_code == 200
    assert "dave@example.com" in account.text
    async with app.state.ctx.sessions() as db:
        link = await db.get(SsoIdentity, (provider.issuer, "dave-1"))
        assert link is not None
        assert link.user_id == squatted.user["id"]
    await assert_taken_back(app, api, squatted, api_token)
    signed_in = await audit_entries(app, "auth.sign_in")
    assert signed_in[-1].details == {"method": "sso", "created": False, "linked": True}
    # A later sign-in takes nothing back again.
    async with open_browser(app, provider) as other:
        await other.sign_in("dave-1")
        assert (await browser.page("/account")).status_code == 200
    assert len(await audit_entries(app, "auth.account_taken_back")) == 1


async def test_an_address_the_provider_does_not_say_is_verified_is_refused(
    app: FastAPI, browser: Browser, provider: OidcProvider
) -> None:
    provider.set_user("erin-1", email="erin@example.com", email_verified=False)
    refused = await browser.sign_in("erin-1")
    assert refused.headers["location"].startswith("/login")
    assert "does not say that the e-mail address of this account is verified" in (
        await browser.notice()
    )
    assert await _user(app, "erin@example.com") is None
    [failed] = await audit_entries(app, "auth.sign_in_failed")
    assert failed.details == {"method": "sso", "reason": "email_unverified"}


async def test_an_address_outside_the_allowed_domains_is_refused(
    settings: Settings, provider: OidcProvider, clock: FrozenClock
) -> None:
    only_acme = Settings(
        **(settings.model_dump() | {"oidc_allowed_domains": "ACME.example, bücher.example"})
    )
    app = create_app(only_acme, clock=clock, migrate_on_start=False)
    try:
        async with open_browser(app, provider) as browser:
            provider.set_user("frank-1", email="frank@elsewhere.example", email_verified=True)
            await browser.sign_in("frank-1")
            page = await browser.notice()
            assert "Only addresses of acme.example, xn--bcher-kva.example may sign in here" in page
            assert await _user(app, "frank@elsewhere.example") is None
            # NFKC and IDNA: a fullwidth letter and a Unicode domain are the domains allowed.
            provider.set_user("gina-1", email="gina@\uff41cme.example", email_verified=True)
            assert (await browser.sign_in("gina-1")).headers["location"] == "/projects"
            provider.set_user("hugo-1", email="hugo@bücher.example", email_verified=True)
            assert (await browser.sign_in("hugo-1")).headers["location"] == "/projects"
        [failed] = await audit_entries(app, "auth.sign_in_failed")
        assert failed.details["reason"] == "domain_not_allowed"
    finally:
        await app.state.ctx.dispose()


async def test_the_provider_saying_no_is_a_sentence_on_the_sign_in_page(
    browser: Browser, provider: OidcProvider
) -> None:
    url = await browser.start()
    async with httpx.AsyncClient(timeout=10) as http:
        assert (await http.get(url)).status_code == 200
        denied = await http.post(url, data={"action": "deny"})
    assert denied.status_code in (302, 303)
    back = urlsplit(denied.headers["location"])
    assert parse_qs(back.query)["error"] == ["access_denied"]
    r = await browser.callback(f"{back.path}?{back.query}")
    assert r.headers["location"].startswith("/login")
    assert "The sign-in was cancelled at Acme ID" in await browser.notice()


async def test_an_error_answer_without_the_flows_state_is_not_shown_as_the_providers(
    app: FastAPI, browser: Browser
) -> None:
    # Anyone can send a person to the callback with an `error` of their wording: only an
    # answer carrying the state of this browser's flow is the provider's.
    await browser.start()
    forged = "account locked: call 555 0100 now"
    r = await browser.callback(f"/auth/sso/callback?error={forged.replace(' ', '+')}")

    assert r.headers["location"].startswith("/login")
    notice = await browser.notice()
    assert "call 555 0100" not in notice
    assert "not started in this browser" in notice
    [failed] = await audit_entries(app, "auth.sign_in_failed")
    assert failed.details["reason"] == "state_mismatch"
    assert forged not in str(failed.details)


async def test_a_callback_replayed_in_another_browser_is_refused(
    app: FastAPI, browser: Browser, provider: OidcProvider
) -> None:
    provider.set_user("ivy-1", email="ivy@example.com", email_verified=True)
    callback = await browser.at_provider(await browser.start(), "ivy-1")
    async with open_browser(app, provider) as attacker:
        await attacker.start()  # a flow of its own: its own state
        refused = await attacker.callback(callback)
        assert refused.headers["location"].startswith("/login")
        assert "not started in this browser" in await attacker.notice()
    async with open_browser(app, provider) as stranger:  # no flow at all
        await stranger.callback(callback)
        assert "not started in this browser" in await stranger.notice()
    assert await _user(app, "ivy@example.com") is None
    reasons = [e.details["reason"] for e in await audit_entries(app, "auth.sign_in_failed")]
    assert reasons == ["state_mismatch", "state_mismatch"]
    # The browser that started it still signs in with it: nothing above spent its code.
    assert (await browser.callback(callback)).headers["location"] == "/projects"


async def test_an_id_token_with_another_nonce_is_refused(
    app: FastAPI, browser: Browser, provider: OidcProvider, settings: Settings
) -> None:
    """The browser's flow cookie is sealed again (with the server's key, which only a test
    has) with the same state and verifier but another nonce: the provider's ID token carries
    the nonce of the authorization request, and the callback refuses it."""
    provider.set_user("jack-1", email="jack@example.com", email_verified=True)
    url = await browser.start()
    callback = await browser.at_provider(url, "jack-1")
    cookie = _FlowCookie(settings.signing_key, secure=False)
    sealed = browser.client.cookies[cookie.name]
    flow = cookie.unseal(sealed, int(app.state.ctx.clock.now().timestamp()))
    assert flow is not None
    tampered = FlowSecrets(flow.secrets.state, "another-nonce", flow.secrets.code_verifier)
    browser.client.cookies.set(cookie.name, cookie.seal(_Flow(tampered, flow.next, flow.started)))
    refused = await browser.callback(callback)
    assert refused.headers["location"].startswith("/login")
    assert "could not be verified" in await browser.notice()
    [failed] = await audit_entries(app, "auth.sign_in_failed")
    assert failed.details["reason"] == "invalid_id_token"
    assert "nonce" in failed.details["why"]
    assert await _user(app, "jack@example.com") is None


def _id_token_for(provider: OidcProvider, client_id: str, sub: str, nonce: str) -> str:
    """An ID token the provider really issues to `client_id` (another relying party), by
    that party's own authorization code flow."""
    redirect = "http://127.0.0.1:9/elsewhere"
    with httpx.Client(timeout=10) as http:
        url = str(
            httpx.URL(
                f"{provider.issuer}/oauth2/authorize",
                params={"response_type": "code", "client_id": client_id, "scope": "openid email",
                        "redirect_uri": redirect, "nonce": nonce, "state": "s"},
            )
        )  # fmt: skip
        code = parse_qs(urlsplit(provider.authorize(url, sub)).query)["code"][0]
        token = http.post(
            f"{provider.issuer}/oauth2/token",
            data={"grant_type": "authorization_code", "code": code, "redirect_uri": redirect},
            auth=(client_id, "its-secret"),
        )
    assert token.status_code == 200, token.text
    id_token: str = token.json()["id_token"]
    return id_token


async def test_an_id_token_issued_to_another_client_is_refused(
    app: FastAPI, provider: OidcProvider
) -> None:
    provider.set_user("kim-1", email="kim@example.com", email_verified=True)
    sso = app.state.ctx.sso
    ours = await asyncio.to_thread(_id_token_for, provider, CLIENT_ID, "kim-1", "n-1")
    assert (await sso.validated_claims(ours, "n-1"))["sub"] == "kim-1"  # the control
    theirs = await asyncio.to_thread(_id_token_for, provider, "another-app", "kim-1", "n-1")
    with pytest.raises(SignInFailed) as refused:
        await sso.validated_claims(theirs, "n-1")
    assert refused.value.code == "invalid_id_token"
    assert "aud" in (refused.value.why or "")


async def test_signing_keys_rotated_at_the_provider_are_fetched_again_once(
    app: FastAPI, clock: FrozenClock, tmp_path_factory: pytest.TempPathFactory
) -> None:
    with oidc_provider_process(tmp_path_factory.mktemp("rotating")) as rotating:
        settings: Settings = app.state.ctx.settings
        rotating_app = create_app(
            sso_settings(settings, rotating), clock=clock, migrate_on_start=False
        )
        directory = rotating_app.state.ctx.sso.directory
        try:
            rotating.set_user("lea-1", email="lea@example.com", email_verified=True)
            async with open_browser(rotating_app, rotating) as browser:
                assert (await browser.sign_in("lea-1")).headers["location"] == "/projects"
            assert directory.key_set_fetches == 1

            rotating.rotate_keys()  # a new signing key, a new kid
            rotating.set_user("lea-1", email="lea@example.com", email_verified=True)
            async with open_browser(rotating_app, rotating) as browser:
                # Within the floor since the last fetch, an unknown kid fetches nothing.
                await browser.sign_in("lea-1")
                assert "could not be verified" in await browser.notice()
            assert directory.key_set_fetches == 1

            clock.advance(seconds=REFETCH_FLOOR + 1)
            async with open_browser(rotating_app, rotating) as browser:
                assert (await browser.sign_in("lea-1")).headers["location"] == "/projects"
            assert directory.key_set_fetches == 2
            clock.advance(seconds=REFETCH_FLOOR + 1)
            async with open_browser(rotating_app, rotating) as browser:  # known now
                assert (await browser.sign_in("lea-1")).headers["location"] == "/projects"
            assert directory.key_set_fetches == 2
        finally:
            await rotating_app.state.ctx.dispose()


async def test_an_invitation_waiting_for_the_address_is_offered_after_sign_in(
    app: FastAPI, browser: Browser, provider: OidcProvider, api: Api
) -> None:
    owner = await api.register("owner@example.com")
    project = await api.project(owner, "Rocket")
    r = await api.client.post(
        f"/api/projects/{project['id']}/invitations",
        json={"email": "mia@example.com", "role": "tester"},
        headers=owner.headers,
    )
    assert r.status_code == 201, r.text
    provider.set_user("mia-1", email="mia@example.com", email_verified=True)
    done = await browser.sign_in("mia-1")
    assert done.headers["location"] == "/projects#received-invitations"
    page = await browser.page("/projects")
    assert "A project invited mia@example.com" in page.text
    assert "Accept and join Rocket" in page.text


async def test_a_provider_that_cannot_be_reached_is_a_sentence_not_an_error(
    settings: Settings, provider: OidcProvider, clock: FrozenClock
) -> None:
    gone = Settings(**(settings.model_dump() | {"oidc_issuer": f"http://127.0.0.1:{free_port()}"}))
    app = create_app(gone, clock=clock, migrate_on_start=False)
    try:
        async with open_browser(app, provider) as browser:
            r = await browser.client.get("/auth/sso/start")
            assert r.status_code == 303
            assert r.headers["location"].startswith("/login")
            assert "Acme ID cannot be reached right now" in await browser.notice()
    finally:
        await app.state.ctx.dispose()

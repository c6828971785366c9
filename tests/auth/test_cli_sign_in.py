"""The command line's sign-in through the console (auth/cli_sign_in.py): the loopback redirect
with PKCE (RFC 8252) and the device grant (RFC 8628), played here by the person (an httpx
client that keeps the console's cookies) and the command line (API calls), on the app with a
clock the tests move. The `buildbay login --sso` command itself, in a process of its own
against a served app, is tests/client/test_login_sso.py."""

from __future__ import annotations

import re
import secrets
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import select

from buildbay.audit.models import AuditEntry
from buildbay.auth.cli_sign_in import USER_CODE_ALPHABET, pkce_challenge
from buildbay.auth.models import CliSignIn, User
from buildbay.auth.password_reset import PasswordResets
from buildbay.builds.sweeper import sweep
from buildbay.clock import FrozenClock
from tests.auth.conftest import bearer
from tests.conftest import BASE_URL, Account, assert_problem

ORIGIN = {"Origin": BASE_URL}
REDIRECT = "http://127.0.0.1:53682/callback"
CSRF = re.compile(r'name="csrf" value="([^"]+)"')


@pytest.fixture
async def person(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """The person at the browser: keeps the console's cookies, follows no redirect by itself."""
    base = BASE_URL.replace("http://", "https://")
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=base) as c:
        yield c


async def sign_in(person: httpx.AsyncClient, account: Account, next_page: str = "") -> str:
    page = await person.get("/login")
    csrf = CSRF.search(page.text)
    assert csrf, page.text[:300]
    data = {"csrf": csrf[1], "email": account.email, "password": account.password}
    if next_page:
        data["next"] = next_page
    r = await person.post("/login", data=data, headers=ORIGIN)
    assert r.status_code == 303, r.text
    return r.headers["location"]


def authorize_query(challenge: str, redirect_uri: str = REDIRECT, **more: str) -> str:
    return urlencode(
        {
            "redirect_uri": redirect_uri,
            "code_challenge": challenge,
            "code_challenge_method": "S256",
            "state": "st-123",
            "client_name": "ada-laptop",
            **more,
        }
    )


def pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    return verifier, pkce_challenge(verifier)


async def allow_on_page(person: httpx.AsyncClient, query: str, decision: str = "allow") -> str:
    """Opens the authorize page and answers it; the address the console redirects to."""
    page = await person.get(f"/cli/authorize?{query}")
    assert page.status_code == 200, page.text
    fields = dict(re.findall(r'<input type="hidden" name="([a-z_]+)" value="([^"]*)"', page.text))
    r = await person.post("/cli/authorize", data={**fields, "decision": decision}, headers=ORIGIN)
    assert r.status_code == 303, r.text
    return str(r.headers["location"])


def grant_refusal(r: httpx.Response, error: str) -> None:
    body = assert_problem(r, 400, error)
    assert body["error"] == error


# -- loopback ------------------------------------------------------------------------------


async def test_a_loopback_sign_in_signs_in_first_then_asks_and_gives_a_token_once(
    app: FastAPI, client: httpx.AsyncClient, person: httpx.AsyncClient, owner: Account
) -> None:
    verifier, challenge = pkce()
    query = authorize_query(challenge)

    r = await person.get(f"/cli/authorize?{query}")
    assert r.status_code == 303
    back = parse_qs(urlsplit(r.headers["location"]).query)["next"][0]
    assert back == f"/cli/authorize?{query}"
    assert await sign_in(person, owner, back) == back
    page = await person.get(back)
    assert "Sign in the Buildbay command line on ada-laptop?" in page.text
    assert "http://127.0.0.1:53682" in page.headers["content-security-policy"]
    location = await allow_on_page(person, query)

    assert location.startswith(REDIRECT + "?")
    answer = parse_qs(urlsplit(location).query)
    assert answer["state"] == ["st-123"]
    code = answer["code"][0]
    body = {"code": code, "codeVerifier": verifier, "redirectUri": REDIRECT}
    r = await client.post("/api/auth/cli/token", json=body)
    assert r.status_code == 200, r.text
    token = r.json()
    assert token["name"] == "CLI on ada-laptop"
    assert token["user"]["email"] == owner.email
    assert token["expiresAt"] is not None
    me = await client.get("/api/auth/me", headers=bearer(token["token"]))
    assert me.json()["email"] == owner.email
    listed = await client.get("/api/account/api-tokens", headers=owner.headers)
    assert [t["name"] for t in listed.json()["apiTokens"]] == ["CLI on ada-laptop"]
    # The code is spent: a replay gets nothing.
    grant_refusal(await client.post("/api/auth/cli/token", json=body), "invalid_grant")
    async with app.state.ctx.sessions() as db:
        entries = (
            await db.scalars(select(AuditEntry).where(AuditEntry.action == "auth.token_created"))
        ).all()
        stored = (await db.scalars(select(CliSignIn))).one()
    # Once, with how it was asked for (the account's service records every token it makes).
    assert [(e.details["via"], e.details["grant"], e.target_id) for e in entries] == [
        ("cli_sso", "loopback", token["id"])
    ]
    assert stored.secret_hash != code
    assert code not in stored.secret_hash


@pytest.mark.parametrize(
    "redirect_uri",
    [
        "https://attacker.example/callback",
        "http://attacker.example:53682/callback",
        "http://127.0.0.1.attacker.example/callback",
        "http://user@127.0.0.1:53682/callback",
        "javascript:alert(1)",
        "http://127.0.0.1:port/callback",
        "http://localhost:53682/callback",  # RFC 8252 §8.3: the IP literals only
        # urlsplit drops tabs and line breaks before it parses; a NUL reached the database
        # (PostgreSQL refuses it: a 500 at Allow).
        "http://127.0.0.1:53682/call\x00back",
        "http://127.0.0.1:53682/call\nback",
        "http://127.0.0.1\t:53682/callback",
    ],
)
async def test_a_redirect_uri_that_is_not_a_loopback_is_refused_with_a_page_never_followed(
    person: httpx.AsyncClient, owner: Account, redirect_uri: str
) -> None:
    await sign_in(person, owner)
    query = authorize_query(pkce()[1], redirect_uri)

    page = await person.get(f"/cli/authorize?{query}")
    assert page.status_code == 400
    assert "location" not in page.headers
    assert "may only send you back to this computer" in page.text
    csrf = CSRF.search((await person.get("/cli/device")).text)
    assert csrf
    fields = {**parse_qs(query), "csrf": csrf[1], "decision": "allow"}
    r = await person.post("/cli/authorize", data=fields, headers=ORIGIN)
    assert r.status_code == 400
    assert "location" not in r.headers


async def test_a_link_without_pkce_s256_is_refused(
    person: httpx.AsyncClient, owner: Account
) -> None:
    await sign_in(person, owner)
    plain = authorize_query("x" * 43, code_challenge_method="plain")

    page = await person.get(f"/cli/authorize?{plain}")

    assert page.status_code == 400
    assert "proof key" in page.text


async def test_a_wrong_verifier_or_redirect_uri_gets_nothing_and_spends_the_code(
    client: httpx.AsyncClient, person: httpx.AsyncClient, owner: Account
) -> None:
    await sign_in(person, owner)
    for wrong in ("verifier", "redirect"):
        verifier, challenge = pkce()
        location = await allow_on_page(person, authorize_query(challenge))
        code = parse_qs(urlsplit(location).query)["code"][0]
        right = {"code": code, "codeVerifier": verifier, "redirectUri": REDIRECT}
        bad = dict(right)
        if wrong == "verifier":
            bad["codeVerifier"] = pkce()[0]
        else:
            bad["redirectUri"] = "http://127.0.0.1:1/callback"

        grant_refusal(await client.post("/api/auth/cli/token", json=bad), "invalid_grant")
        grant_refusal(await client.post("/api/auth/cli/token", json=right), "invalid_grant")

    listed = await client.get("/api/account/api-tokens", headers=owner.headers)
    assert listed.json()["apiTokens"] == []


async def test_deny_redirects_with_access_denied_and_a_code_expires_in_two_minutes(
    client: httpx.AsyncClient, person: httpx.AsyncClient, owner: Account, clock: FrozenClock
) -> None:
    await sign_in(person, owner)
    verifier, challenge = pkce()

    denied = await allow_on_page(person, authorize_query(challenge), decision="deny")
    assert parse_qs(urlsplit(denied).query) == {"error": ["access_denied"], "state": ["st-123"]}

    location = await allow_on_page(person, authorize_query(challenge))
    code = parse_qs(urlsplit(location).query)["code"][0]
    clock.advance(minutes=2)
    body = {"code": code, "codeVerifier": verifier, "redirectUri": REDIRECT}
    grant_refusal(await client.post("/api/auth/cli/token", json=body), "invalid_grant")


async def test_the_allow_form_needs_the_pages_csrf_token(
    client: httpx.AsyncClient, person: httpx.AsyncClient, owner: Account
) -> None:
    await sign_in(person, owner)
    fields = parse_qs(authorize_query(pkce()[1]))

    r = await person.post("/cli/authorize", data={**fields, "decision": "allow"}, headers=ORIGIN)

    assert r.status_code == 403
    assert "location" not in r.headers


async def test_a_malformed_token_request_is_a_422_problem(client: httpx.AsyncClient) -> None:
    body = {"code": "bbc_x", "codeVerifier": "short", "redirectUri": REDIRECT}

    r = await client.post("/api/auth/cli/token", json=body)

    assert_problem(r, 422, "validation_error")


# -- device grant --------------------------------------------------------------------------


async def start_device(client: httpx.AsyncClient) -> dict[str, Any]:
    r = await client.post("/api/auth/device/code", json={"clientName": "build box\u202e"})
    assert r.status_code == 200, r.text
    grant: dict[str, Any] = r.json()
    return grant


async def decide(person: httpx.AsyncClient, user_code: str, decision: str) -> httpx.Response:
    page = await person.get(f"/cli/device?{urlencode({'code': user_code})}")
    assert page.status_code == 200, page.text
    csrf = CSRF.search(page.text)
    assert csrf
    data = {"csrf": csrf[1], "code": user_code, "decision": decision}
    return await person.post("/cli/device", data=data, headers=ORIGIN)


async def test_a_device_sign_in_polls_until_allowed_then_gets_the_token_once(
    client: httpx.AsyncClient, person: httpx.AsyncClient, owner: Account, clock: FrozenClock
) -> None:
    grant = await start_device(client)
    assert re.fullmatch(
        f"[{USER_CODE_ALPHABET}]{{4}}-[{USER_CODE_ALPHABET}]{{4}}", grant["userCode"]
    )
    assert grant["verificationUri"] == f"{BASE_URL}/cli/device"
    assert grant["verificationUriComplete"] == f"{BASE_URL}/cli/device?code={grant['userCode']}"
    assert (grant["expiresIn"], grant["interval"]) == (600, 5)
    poll = {"deviceCode": grant["deviceCode"]}

    grant_refusal(await client.post("/api/auth/device/token", json=poll), "authorization_pending")
    # Sooner than the interval: slow down, and the interval is 5 seconds longer from now on.
    clock.advance(seconds=4)
    slow = await client.post("/api/auth/device/token", json=poll)
    grant_refusal(slow, "slow_down")
    assert "wait 10 seconds" in slow.json()["detail"]
    clock.advance(seconds=9)
    grant_refusal(await client.post("/api/auth/device/token", json=poll), "slow_down")

    # The person: sent to sign in, back with the code filled in, asked, allows.
    r = await person.get("/cli/device?" + urlsplit(grant["verificationUriComplete"]).query)
    assert r.status_code == 303
    back = parse_qs(urlsplit(r.headers["location"]).query)["next"][0]
    await sign_in(person, owner, back)
    lowercase = grant["userCode"].lower().replace("-", " ")
    page = await person.get(f"/cli/device?{urlencode({'code': lowercase})}")
    assert "Sign in the Buildbay command line on build-box?" in page.text
    assert grant["userCode"] in page.text
    allowed = await decide(person, grant["userCode"], "allow")
    assert allowed.headers["location"] == "/cli/device?done=allowed"

    clock.advance(seconds=15)
    r = await client.post("/api/auth/device/token", json=poll)
    assert r.status_code == 200, r.text
    assert r.json()["name"] == "CLI on build-box"
    me = await client.get("/api/auth/me", headers=bearer(r.json()["token"]))
    assert me.json()["email"] == owner.email
    clock.advance(seconds=15)
    grant_refusal(await client.post("/api/auth/device/token", json=poll), "invalid_grant")
    # Nor can the code be allowed again.
    again = await person.get(f"/cli/device?{urlencode({'code': grant['userCode']})}")
    assert again.status_code == 404
    assert "No command line waits for this code" in again.text


async def test_a_device_sign_in_denied_answers_access_denied(
    client: httpx.AsyncClient, person: httpx.AsyncClient, owner: Account, clock: FrozenClock
) -> None:
    grant = await start_device(client)
    await sign_in(person, owner)

    denied = await decide(person, grant["userCode"], "deny")

    assert denied.headers["location"] == "/cli/device?done=denied"
    poll = {"deviceCode": grant["deviceCode"]}
    grant_refusal(await client.post("/api/auth/device/token", json=poll), "access_denied")
    listed = await client.get("/api/account/api-tokens", headers=owner.headers)
    assert listed.json()["apiTokens"] == []


async def test_a_user_code_drawn_twice_is_drawn_again_so_one_allow_reaches_one_command_line(
    client: httpx.AsyncClient, person: httpx.AsyncClient, owner: Account, clock: FrozenClock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    # A user code drawn again (the grants of a day are kept, each user code unique): the
    # second start was a 500. It draws another, and one Allow reaches one command line.
    drawn = iter("BCDFGHJK" * 2)
    choice = secrets.choice
    monkeypatch.setattr(secrets, "choice", lambda seq: next(drawn, None) or choice(seq))
    mine, other = await start_device(client), await start_device(client)

    assert mine["userCode"] == "BCDF-GHJK"
    assert other["userCode"] != mine["userCode"]
    await sign_in(person, owner)
    await decide(person, mine["userCode"], "allow")
    clock.advance(seconds=15)
    r = await client.post("/api/auth/device/token", json={"deviceCode": mine["deviceCode"]})
    assert r.status_code == 200, r.text
    r = await client.post("/api/auth/device/token", json={"deviceCode": other["deviceCode"]})
    grant_refusal(r, "authorization_pending")


async def test_a_device_code_expires_after_ten_minutes(
    client: httpx.AsyncClient, person: httpx.AsyncClient, owner: Account, clock: FrozenClock
) -> None:
    grant = await start_device(client)
    await sign_in(person, owner)
    clock.advance(minutes=10)

    page = await person.get(f"/cli/device?{urlencode({'code': grant['userCode']})}")
    assert page.status_code == 404
    poll = {"deviceCode": grant["deviceCode"]}
    grant_refusal(await client.post("/api/auth/device/token", json=poll), "expired_token")


async def test_an_unknown_device_code_is_invalid_grant(client: httpx.AsyncClient) -> None:
    r = await client.post("/api/auth/device/token", json={"deviceCode": "bbd_unknown"})

    grant_refusal(r, "invalid_grant")


async def test_guessing_user_codes_is_throttled(
    client: httpx.AsyncClient, person: httpx.AsyncClient, owner: Account
) -> None:
    await sign_in(person, owner)
    for _ in range(30):
        r = await person.get("/cli/device?code=BBBB-BBBB")
        assert r.status_code == 404

    r = await person.get("/cli/device?code=BBBB-BBBB")

    assert r.status_code == 429
    assert int(r.headers["retry-after"]) > 0
    # A real code is refused too until the hour has passed.
    grant = await start_device(client)
    page = await person.get(f"/cli/device?{urlencode({'code': grant['userCode']})}")
    assert page.status_code == 429


async def test_the_sweeper_forgets_sign_ins_a_day_after_they_expired(
    app: FastAPI, client: httpx.AsyncClient, clock: FrozenClock
) -> None:
    await start_device(client)
    clock.advance(days=1, minutes=10, seconds=1)
    await start_device(client)
    ctx = app.state.ctx

    await sweep(ctx.sessions, ctx.storage, clock.now(), BASE_URL)

    async with ctx.sessions() as db:
        left = (await db.scalars(select(CliSignIn.created_at))).all()
    assert left == [clock.now()]


async def test_a_password_reset_after_allowing_leaves_the_code_worthless(
    app: FastAPI, client: httpx.AsyncClient, person: httpx.AsyncClient, owner: Account
) -> None:
    await sign_in(person, owner)
    verifier, challenge = pkce()
    location = await allow_on_page(person, authorize_query(challenge))
    ctx = app.state.ctx
    async with ctx.sessions() as db, db.begin():
        user = await db.get_one(User, owner.user["id"])
        reset = await PasswordResets(db, ctx.clock.now()).issue(user)
    r = await client.post(
        "/api/auth/password-reset/confirm", json={"token": reset, "password": "a new password"}
    )
    assert r.status_code == 204, r.text

    code = parse_qs(urlsplit(location).query)["code"][0]
    body = {"code": code, "codeVerifier": verifier, "redirectUri": REDIRECT}
    r = await client.post("/api/auth/cli/token", json=body)

    grant_refusal(r, "invalid_grant")
    assert "password was reset" in r.json()["detail"]

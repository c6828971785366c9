"""The access token: a JWT for 24 hours, checked on every request."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Callable
from typing import Any

import httpx
import jwt
import pytest

from buildbay.auth.tokens import derive_key
from buildbay.clock import FrozenClock
from buildbay.config import Settings
from tests.auth.conftest import bearer
from tests.conftest import Account, assert_problem

DAY = 24 * 3600


def _b64(data: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


def claims_of(token: str) -> dict[str, Any]:
    claims: dict[str, Any] = jwt.decode(token, options={"verify_signature": False})
    return claims


async def test_me_answers_the_calling_user(client: httpx.AsyncClient, owner: Account) -> None:
    r = await client.get("/api/auth/me", headers=owner.headers)

    assert r.status_code == 200, r.text
    body = r.json()
    # The seed's User, plus the storage usage and the plan's limits.
    assert {k: v for k, v in body.items() if k not in {"usage", "limits"}} == owner.user
    assert set(body) == {"id", "email", "name", "plan", "createdAt", "usage", "limits"}
    assert body["usage"] == {"storageBytes": 0, "builds": 0}
    assert body["limits"] == {
        "storageQuotaBytes": 5 * 1024**3,
        "maxUploadBytes": 1024**3,
        "requestsPerMinute": 100,
    }


async def test_access_token_is_a_jwt_expiring_24_hours_after_issue(
    owner: Account, clock: FrozenClock
) -> None:
    claims = claims_of(owner.access_token)

    issued_at = int(clock.now().timestamp())
    assert claims["sub"] == owner.user["id"]
    assert claims["typ"] == "access"
    assert claims["jti"]
    assert claims["iat"] == issued_at
    assert claims["exp"] == issued_at + DAY


async def test_every_access_token_has_its_own_jti(
    client: httpx.AsyncClient, owner: Account
) -> None:
    r = await client.post(
        "/api/auth/login", json={"email": owner.email, "password": owner.password}
    )

    assert claims_of(r.json()["access_token"])["jti"] != claims_of(owner.access_token)["jti"]


async def test_access_token_works_until_24_hours_then_answers_401(
    client: httpx.AsyncClient, owner: Account, clock: FrozenClock
) -> None:
    clock.advance(hours=23, minutes=59)
    r = await client.get("/api/auth/me", headers=owner.headers)
    assert r.status_code == 200, r.text

    clock.advance(minutes=1, seconds=1)  # 24 h and 1 s after issue
    r = await client.get("/api/auth/me", headers=owner.headers)

    assert_problem(r, 401, "token_expired")
    assert r.headers["WWW-Authenticate"] == "Bearer"


async def test_an_expired_access_token_is_refused_on_resource_endpoints_too(
    client: httpx.AsyncClient, owner: Account, clock: FrozenClock
) -> None:
    clock.advance(hours=24, seconds=1)

    r = await client.get("/api/projects", headers=owner.headers)

    assert_problem(r, 401, "token_expired")


def _alg_none(token: str, settings: Settings) -> str:
    return f"{_b64({'alg': 'none', 'typ': 'JWT'})}.{_b64(claims_of(token))}."


def _wrong_key(token: str, settings: Settings) -> str:
    return jwt.encode(claims_of(token), "some-other-key-that-is-long-enough-012345", "HS256")


def _the_secret_key_itself(token: str, settings: Settings) -> str:
    return jwt.encode(claims_of(token), settings.signing_key, "HS256")


def _algorithm_outside_the_allowlist(token: str, settings: Settings) -> str:
    # Signed with the right key, but by HS512 (built by hand: PyJWT warns on the key length).
    key = derive_key(settings.signing_key, "access-token")
    signing_input = f"{_b64({'alg': 'HS512', 'typ': 'JWT'})}.{_b64(claims_of(token))}"
    signature = hmac.new(key, signing_input.encode(), hashlib.sha512).digest()
    return f"{signing_input}.{base64.urlsafe_b64encode(signature).rstrip(b'=').decode()}"


def _payload_with_exp_a_year_later(token: str, settings: Settings) -> str:
    header, _, signature = token.split(".")
    claims = claims_of(token)
    claims["exp"] += 365 * DAY
    return f"{header}.{_b64(claims)}.{signature}"


def _signature_removed(token: str, settings: Settings) -> str:
    return token.rsplit(".", 1)[0] + "."


def _not_a_jwt(token: str, settings: Settings) -> str:
    return "not-a-jwt"


@pytest.mark.parametrize(
    "forge",
    [
        _alg_none,
        _wrong_key,
        _the_secret_key_itself,
        _algorithm_outside_the_allowlist,
        _payload_with_exp_a_year_later,
        _signature_removed,
        _not_a_jwt,
    ],
)
async def test_forged_or_tampered_access_tokens_answer_401(
    client: httpx.AsyncClient,
    owner: Account,
    settings: Settings,
    forge: Callable[[str, Settings], str],
) -> None:
    token = forge(owner.access_token, settings)

    r = await client.get("/api/auth/me", headers=bearer(token))

    assert_problem(r, 401, "invalid_token")
    assert r.headers["WWW-Authenticate"] == "Bearer"
    # The genuine token still works: the refusal is about the forgery, not the account.
    assert (await client.get("/api/auth/me", headers=owner.headers)).status_code == 200


async def test_a_refresh_token_is_not_accepted_as_a_bearer_token(
    client: httpx.AsyncClient, owner: Account
) -> None:
    r = await client.get("/api/auth/me", headers=bearer(owner.refresh_token))

    assert_problem(r, 401, "invalid_token")
    assert r.headers["WWW-Authenticate"] == "Bearer"


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": ""},
        {"Authorization": "Bearer"},
        {"Authorization": "Basic b3duZXJAZXhhbXBsZS5jb206Y29ycmVjdCBob3JzZQ=="},
    ],
    ids=["no header", "empty header", "no token", "basic auth"],
)
async def test_a_request_without_a_bearer_token_answers_401(
    client: httpx.AsyncClient, owner: Account, headers: dict[str, str]
) -> None:
    r = await client.get("/api/auth/me", headers=headers)

    assert_problem(r, 401, "not_authenticated")
    assert r.headers["WWW-Authenticate"] == "Bearer"


async def test_the_bearer_scheme_is_case_insensitive(
    client: httpx.AsyncClient, owner: Account
) -> None:
    r = await client.get("/api/auth/me", headers={"Authorization": f"bearer {owner.access_token}"})

    assert r.status_code == 200, r.text

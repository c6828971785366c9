"""Refresh tokens: single use, rotated on every refresh, one family per login, 30 days at most."""

from __future__ import annotations

import httpx
import pytest
from fastapi import FastAPI

from buildbay.auth.models import RefreshToken
from buildbay.clock import FrozenClock
from tests.auth.conftest import Login, Refresh, assert_new_token_pair, bearer, stored_values
from tests.conftest import Account, assert_problem


async def me(client: httpx.AsyncClient, access_token: str) -> httpx.Response:
    return await client.get("/api/auth/me", headers=bearer(access_token))


async def test_refresh_tokens_are_stored_only_as_hashes(
    refresh: Refresh, app: FastAPI, owner: Account
) -> None:
    rotated = (await refresh(owner.refresh_token)).json()["refresh_token"]

    values = await stored_values(app, RefreshToken)

    assert len(values) > 0
    for secret in (owner.refresh_token, rotated):
        assert not [v for v in values if secret.removeprefix("bbr_") in v]


async def test_refresh_answers_a_new_token_pair_and_the_user(
    refresh: Refresh, owner: Account
) -> None:
    r = await refresh(owner.refresh_token)

    assert r.status_code == 200, r.text
    body = r.json()
    assert_new_token_pair(body, owner)


async def test_refresh_rotates_and_the_new_pair_works(
    client: httpx.AsyncClient, refresh: Refresh, owner: Account
) -> None:
    """Each refresh answers secrets never seen before, which act for the same user, and the new
    refresh token refreshes in turn (that the old one is spent: the single-use tests below)."""
    second = (await refresh(owner.refresh_token)).json()
    third_response = await refresh(second["refresh_token"])
    assert third_response.status_code == 200, third_response.text
    third = third_response.json()

    refresh_tokens = [owner.refresh_token, second["refresh_token"], third["refresh_token"]]
    access_tokens = [owner.access_token, second["access_token"], third["access_token"]]
    assert len(set(refresh_tokens)) == 3, "a refresh answered a refresh token seen before"
    assert len(set(access_tokens)) == 3, "a refresh answered an access token seen before"
    for pair in (second, third):
        assert pair["user"]["id"] == owner.user["id"]
        answer = await me(client, pair["access_token"])
        assert answer.status_code == 200, answer.text
        assert answer.json()["id"] == owner.user["id"]


async def test_a_refresh_token_can_be_used_only_once(refresh: Refresh, owner: Account) -> None:
    assert (await refresh(owner.refresh_token)).status_code == 200

    r = await refresh(owner.refresh_token)

    assert_problem(r, 401, "refresh_token_reused")
    assert r.headers["WWW-Authenticate"] == "Bearer"


async def test_refresh_token_reuse_revokes_the_whole_family(
    client: httpx.AsyncClient, refresh: Refresh, owner: Account
) -> None:
    second = (await refresh(owner.refresh_token)).json()
    third = (await refresh(second["refresh_token"])).json()

    reused = await refresh(owner.refresh_token)  # e.g. a stolen copy of the first one

    assert_problem(reused, 401, "refresh_token_reused")
    # The newest refresh token of the family is dead too ...
    assert_problem(await refresh(third["refresh_token"]), 401)
    # ... and so is every access token of that login.
    for access_token in (owner.access_token, second["access_token"], third["access_token"]):
        r = await me(client, access_token)
        assert_problem(r, 401, "token_revoked")
        assert r.headers["WWW-Authenticate"] == "Bearer"


async def test_refresh_token_reuse_leaves_the_users_other_sessions_alone(
    client: httpx.AsyncClient, refresh: Refresh, login: Login, owner: Account
) -> None:
    laptop = await login(owner)
    await refresh(owner.refresh_token)

    assert_problem(await refresh(owner.refresh_token), 401, "refresh_token_reused")

    assert (await me(client, laptop.access_token)).status_code == 200
    assert (await refresh(laptop.refresh_token)).status_code == 200


async def test_refresh_token_lives_30_days_from_login_even_when_rotated(
    refresh: Refresh, owner: Account, clock: FrozenClock
) -> None:
    clock.advance(days=29, hours=23)
    r = await refresh(owner.refresh_token)
    assert r.status_code == 200, r.text

    clock.advance(hours=1)  # 30 days after the login; the rotated token does not extend it
    r = await refresh(r.json()["refresh_token"])

    assert_problem(r, 401, "session_ended")
    assert r.headers["WWW-Authenticate"] == "Bearer"


async def test_refresh_after_30_days_answers_401(
    refresh: Refresh, owner: Account, clock: FrozenClock
) -> None:
    clock.advance(days=30)

    assert_problem(await refresh(owner.refresh_token), 401, "session_ended")


async def test_refresh_still_works_after_the_access_token_expired(
    client: httpx.AsyncClient, refresh: Refresh, owner: Account, clock: FrozenClock
) -> None:
    clock.advance(days=2)
    assert_problem(await me(client, owner.access_token), 401, "token_expired")

    r = await refresh(owner.refresh_token)

    assert r.status_code == 200, r.text
    assert (await me(client, r.json()["access_token"])).status_code == 200


@pytest.mark.parametrize(
    "token",
    ["bbr_unknown", "not-a-token", "access token"],
    ids=["unknown refresh token", "garbage", "an access token"],
)
async def test_an_unknown_refresh_token_answers_401(
    refresh: Refresh, owner: Account, token: str
) -> None:
    if token == "access token":
        token = owner.access_token

    r = await refresh(token)

    assert_problem(r, 401, "invalid_token")
    assert r.headers["WWW-Authenticate"] == "Bearer"


async def test_an_api_token_is_not_a_refresh_token(
    client: httpx.AsyncClient, refresh: Refresh, owner: Account
) -> None:
    created = await client.post(
        "/api/account/api-tokens", json={"name": "CI"}, headers=owner.headers
    )

    assert_problem(await refresh(created.json()["token"]), 401, "invalid_token")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "refresh_token"),
        ({"refresh_token": ""}, "refresh_token"),
        ({"refreshToken": "bbr_x"}, "refreshToken"),
        ({"refresh_token": "bbr_x", "grant_type": "refresh_token"}, "grant_type"),
    ],
    ids=["missing", "empty", "camelCase", "unknown field"],
)
async def test_refresh_with_an_invalid_body_is_422(
    client: httpx.AsyncClient, body: dict[str, str], field: str
) -> None:
    r = await client.post("/api/auth/refresh-token", json=body)

    problem = assert_problem(r, 422, "validation_error")
    assert field in [e["field"] for e in problem["errors"]]

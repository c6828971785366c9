"""Logout ends one session: its access tokens and its refresh-token family."""

from __future__ import annotations

import httpx

from tests.auth.conftest import Login, Refresh, bearer
from tests.conftest import Account, Api, assert_problem


async def me(client: httpx.AsyncClient, access_token: str) -> httpx.Response:
    return await client.get("/api/auth/me", headers=bearer(access_token))


async def test_logout_answers_204_without_a_body(client: httpx.AsyncClient, owner: Account) -> None:
    r = await client.post("/api/auth/logout", headers=owner.headers)

    assert r.status_code == 204, r.text
    assert r.content == b""


async def test_logout_revokes_the_calling_access_token(
    client: httpx.AsyncClient, owner: Account
) -> None:
    await client.post("/api/auth/logout", headers=owner.headers)

    r = await me(client, owner.access_token)

    assert_problem(r, 401, "token_revoked")
    assert r.headers["WWW-Authenticate"] == "Bearer"
    assert_problem(await client.post("/api/auth/logout", headers=owner.headers), 401)


async def test_logout_revokes_the_sessions_refresh_family(
    client: httpx.AsyncClient, refresh: Refresh, owner: Account
) -> None:
    second = (await refresh(owner.refresh_token)).json()

    r = await client.post("/api/auth/logout", headers=bearer(second["access_token"]))
    assert r.status_code == 204, r.text

    assert_problem(await refresh(second["refresh_token"]), 401, "session_ended")
    # The session's earlier access token dies with it.
    assert_problem(await me(client, owner.access_token), 401, "token_revoked")


async def test_logout_leaves_the_users_other_sessions_alone(
    client: httpx.AsyncClient, refresh: Refresh, login: Login, owner: Account
) -> None:
    laptop = await login(owner)

    await client.post("/api/auth/logout", headers=owner.headers)

    assert (await me(client, laptop.access_token)).status_code == 200
    assert (await refresh(laptop.refresh_token)).status_code == 200


async def test_logout_with_a_refresh_token_also_ends_that_session(
    client: httpx.AsyncClient, refresh: Refresh, login: Login, owner: Account
) -> None:
    laptop = await login(owner)
    phone = await login(owner)

    r = await client.post(
        "/api/auth/logout", json={"refresh_token": laptop.refresh_token}, headers=owner.headers
    )

    assert r.status_code == 204, r.text
    assert_problem(await me(client, owner.access_token), 401, "token_revoked")
    assert_problem(await me(client, laptop.access_token), 401, "token_revoked")
    assert_problem(await refresh(laptop.refresh_token), 401, "session_ended")
    assert (await me(client, phone.access_token)).status_code == 200


async def test_logout_with_an_api_token_ends_the_session_of_the_refresh_token_given(
    client: httpx.AsyncClient, refresh: Refresh, owner: Account
) -> None:
    created = await client.post(
        "/api/account/api-tokens", json={"name": "CI"}, headers=owner.headers
    )
    api_token = created.json()["token"]

    r = await client.post(
        "/api/auth/logout", json={"refresh_token": owner.refresh_token}, headers=bearer(api_token)
    )

    assert r.status_code == 204, r.text
    assert_problem(await refresh(owner.refresh_token), 401, "session_ended")
    assert_problem(await me(client, owner.access_token), 401, "token_revoked")
    assert (await me(client, api_token)).status_code == 200


async def test_logout_cannot_end_another_users_session(
    client: httpx.AsyncClient, api: Api, refresh: Refresh, owner: Account
) -> None:
    mallory = await api.register("mallory@example.com")

    r = await client.post(
        "/api/auth/logout", json={"refresh_token": owner.refresh_token}, headers=mallory.headers
    )

    assert r.status_code == 204, r.text
    assert (await me(client, owner.access_token)).status_code == 200
    assert (await refresh(owner.refresh_token)).status_code == 200


async def test_logout_without_a_token_answers_401(
    client: httpx.AsyncClient, owner: Account
) -> None:
    r = await client.post("/api/auth/logout", json={"refresh_token": owner.refresh_token})

    assert_problem(r, 401, "not_authenticated")
    assert r.headers["WWW-Authenticate"] == "Bearer"
    assert (await me(client, owner.access_token)).status_code == 200


async def test_logout_with_an_unknown_body_field_is_422(
    client: httpx.AsyncClient, owner: Account
) -> None:
    r = await client.post("/api/auth/logout", json={"everywhere": True}, headers=owner.headers)

    problem = assert_problem(r, 422, "validation_error")
    assert [e["field"] for e in problem["errors"]] == ["everywhere"]

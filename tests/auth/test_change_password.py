"""Changing the password: proven by the current one, and every other login of the user ends."""

from __future__ import annotations

import httpx
import pytest

from tests.auth.conftest import Login, Refresh, bearer
from tests.conftest import Account, Api, assert_problem

NEW_PASSWORD = "a new and longer passphrase"


async def change_password(
    client: httpx.AsyncClient, account: Account, current: str, new: str
) -> httpx.Response:
    return await client.post(
        "/api/auth/change-password",
        json={"currentPassword": current, "newPassword": new},
        headers=account.headers,
    )


async def log_in(client: httpx.AsyncClient, email: str, password: str) -> httpx.Response:
    return await client.post("/api/auth/login", json={"email": email, "password": password})


async def me(client: httpx.AsyncClient, token: str) -> httpx.Response:
    return await client.get("/api/auth/me", headers=bearer(token))


async def test_change_password_answers_204_and_only_the_new_password_logs_in(
    client: httpx.AsyncClient, owner: Account
) -> None:
    r = await change_password(client, owner, owner.password, NEW_PASSWORD)

    assert r.status_code == 204, r.text
    assert r.content == b""
    assert_problem(await log_in(client, owner.email, owner.password), 401, "invalid_credentials")
    r = await log_in(client, owner.email, NEW_PASSWORD)
    assert r.status_code == 200, r.text
    assert r.json()["user"]["id"] == owner.user["id"]


async def test_change_password_ends_every_other_session_of_the_user(
    client: httpx.AsyncClient, refresh: Refresh, login: Login, owner: Account
) -> None:
    laptop = await login(owner)
    phone = await login(owner)
    rotated = (await refresh(phone.refresh_token)).json()  # a family that has moved on

    r = await change_password(client, owner, owner.password, NEW_PASSWORD)

    assert r.status_code == 204, r.text
    for token in (laptop.access_token, phone.access_token, rotated["access_token"]):
        r = await me(client, token)
        assert_problem(r, 401, "token_revoked")
        assert r.headers["WWW-Authenticate"] == "Bearer"
    for token in (laptop.refresh_token, rotated["refresh_token"]):
        assert_problem(await refresh(token), 401, "session_ended")
    # The spent refresh token of the phone's family is refused too, as a spent one.
    assert_problem(await refresh(phone.refresh_token), 401)


async def test_change_password_keeps_the_callers_own_session(
    client: httpx.AsyncClient, refresh: Refresh, owner: Account
) -> None:
    r = await change_password(client, owner, owner.password, NEW_PASSWORD)
    assert r.status_code == 204, r.text

    assert (await me(client, owner.access_token)).status_code == 200
    r = await refresh(owner.refresh_token)
    assert r.status_code == 200, r.text
    assert (await me(client, r.json()["access_token"])).status_code == 200


async def test_a_session_cached_a_moment_ago_is_refused_at_once(
    client: httpx.AsyncClient, login: Login, owner: Account
) -> None:
    laptop = await login(owner)
    assert (await me(client, laptop.access_token)).status_code == 200  # now in the cache

    assert (await change_password(client, owner, owner.password, NEW_PASSWORD)).status_code == 204

    assert_problem(await me(client, laptop.access_token), 401, "token_revoked")


async def test_change_password_leaves_other_users_alone(
    client: httpx.AsyncClient, api: Api, owner: Account
) -> None:
    other = await api.register("other@example.com")
    assert (await me(client, other.access_token)).status_code == 200

    assert (await change_password(client, owner, owner.password, NEW_PASSWORD)).status_code == 204

    assert (await me(client, other.access_token)).status_code == 200
    assert (await log_in(client, other.email, other.password)).status_code == 200


async def create_api_token(client: httpx.AsyncClient, account: Account) -> str:
    r = await client.post("/api/account/api-tokens", json={"name": "CI"}, headers=account.headers)
    assert r.status_code == 201, r.text
    token: str = r.json()["token"]
    return token


async def test_api_tokens_outlive_a_password_change(
    client: httpx.AsyncClient, owner: Account
) -> None:
    ci = await create_api_token(client, owner)

    assert (await change_password(client, owner, owner.password, NEW_PASSWORD)).status_code == 204

    # A credential of its own, for CI: it goes when it is deleted, not with the password.
    assert (await me(client, ci)).status_code == 200


async def test_change_password_with_an_api_token_is_refused_and_changes_nothing(
    client: httpx.AsyncClient, refresh: Refresh, owner: Account
) -> None:
    ci = Account(owner.email, owner.password, await create_api_token(client, owner), "", {})

    r = await change_password(client, ci, owner.password, NEW_PASSWORD)

    # A leaked CI token must not take the account: only a login changes the password.
    assert_problem(r, 403, "interactive_session_required")
    assert (await me(client, owner.access_token)).status_code == 200
    assert (await refresh(owner.refresh_token)).status_code == 200
    r = await client.post(
        "/api/auth/login", json={"email": owner.email, "password": owner.password}
    )
    assert r.status_code == 200, r.text


async def test_a_wrong_current_password_is_422_and_changes_nothing(
    client: httpx.AsyncClient, login: Login, owner: Account
) -> None:
    laptop = await login(owner)

    r = await change_password(client, owner, "not the password", NEW_PASSWORD)

    problem = assert_problem(r, 422, "wrong_password")
    assert problem["errors"] == [
        {"field": "currentPassword", "message": "is not your current password"}
    ]
    # A valid token with a wrong password is no reason to authenticate again: not a 401.
    assert "www-authenticate" not in r.headers
    assert (await log_in(client, owner.email, owner.password)).status_code == 200
    assert_problem(await log_in(client, owner.email, NEW_PASSWORD), 401, "invalid_credentials")
    assert (await me(client, laptop.access_token)).status_code == 200


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"currentPassword": "correct horse", "newPassword": "short12"}, "newPassword"),
        ({"currentPassword": "correct horse", "newPassword": "x" * 129}, "newPassword"),
        ({"currentPassword": "correct horse"}, "newPassword"),
        ({"newPassword": NEW_PASSWORD}, "currentPassword"),
        ({"currentPassword": "", "newPassword": NEW_PASSWORD}, "currentPassword"),
        ({"current_password": "correct horse", "newPassword": NEW_PASSWORD}, "current_password"),
        (
            {"currentPassword": "correct horse", "newPassword": NEW_PASSWORD, "email": "x@y.z"},
            "email",
        ),
    ],
    ids=["new too short", "new too long", "new missing", "current missing", "current empty",
         "snake_case", "unknown field"],
)  # fmt: skip
async def test_the_new_password_is_validated_like_registration(
    client: httpx.AsyncClient, owner: Account, body: dict[str, str], field: str
) -> None:
    r = await client.post("/api/auth/change-password", json=body, headers=owner.headers)

    problem = assert_problem(r, 422, "validation_error")
    assert field in [e["field"] for e in problem["errors"]]
    assert (await log_in(client, owner.email, owner.password)).status_code == 200


async def test_passwords_are_taken_as_typed(client: httpx.AsyncClient, owner: Account) -> None:
    padded = f"  {NEW_PASSWORD}  "

    assert (await change_password(client, owner, owner.password, padded)).status_code == 204

    assert (await log_in(client, owner.email, padded)).status_code == 200
    assert_problem(await log_in(client, owner.email, NEW_PASSWORD), 401, "invalid_credentials")

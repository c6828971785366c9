from __future__ import annotations

import httpx
import pytest

from tests.auth.conftest import assert_new_token_pair, bearer
from tests.conftest import Account, assert_problem


async def login(client: httpx.AsyncClient, email: str, password: str) -> httpx.Response:
    return await client.post("/api/auth/login", json={"email": email, "password": password})


async def test_login_answers_a_new_token_pair_and_the_user(
    client: httpx.AsyncClient, owner: Account
) -> None:
    r = await login(client, owner.email, owner.password)

    assert r.status_code == 200, r.text
    body = r.json()
    assert_new_token_pair(body, owner)
    me = await client.get("/api/auth/me", headers=bearer(body["access_token"]))
    assert me.status_code == 200, me.text
    assert me.json()["id"] == owner.user["id"]


async def test_login_email_is_case_insensitive(client: httpx.AsyncClient, owner: Account) -> None:
    r = await login(client, "OWNER@Example.COM", owner.password)

    assert r.status_code == 200, r.text
    assert r.json()["user"]["id"] == owner.user["id"]


async def test_wrong_password_and_unknown_email_get_the_same_401(
    client: httpx.AsyncClient, owner: Account
) -> None:
    wrong_password = await login(client, owner.email, "not the password")
    unknown_email = await login(client, "nobody@example.com", owner.password)

    for r in (wrong_password, unknown_email):
        assert_problem(r, 401, "invalid_credentials")
        assert r.headers["WWW-Authenticate"] == "Bearer"
        assert "access_token" not in r.text
    first, second = wrong_password.json(), unknown_email.json()
    assert first.pop("requestId") != second.pop("requestId")
    assert first == second


async def test_the_password_is_case_sensitive(client: httpx.AsyncClient, owner: Account) -> None:
    r = await login(client, owner.email, owner.password.upper())

    assert_problem(r, 401, "invalid_credentials")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"email": "owner@example.com"}, "password"),
        ({"password": "correct horse"}, "email"),
        ({"email": "owner@example.com", "password": "correct horse", "remember": True}, "remember"),
    ],
)
async def test_login_with_a_missing_or_unknown_field_is_422(
    client: httpx.AsyncClient, owner: Account, body: dict[str, object], field: str
) -> None:
    r = await client.post("/api/auth/login", json=body)

    problem = assert_problem(r, 422, "validation_error")
    assert [e["field"] for e in problem["errors"]] == [field]

"""API tokens for CI: created in account settings, shown once, used like an access token."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from buildbay.auth.models import ApiToken
from buildbay.clock import FrozenClock
from tests.auth.conftest import bearer, stored_values
from tests.conftest import Account, Api, assert_problem, iso_z

API_TOKEN_FIELDS = {
    "id", "name", "prefix", "createdAt", "expiresAt", "lastUsedAt", "scope", "projectIds",
}  # fmt: skip


async def create_token(client: httpx.AsyncClient, account: Account, **body: Any) -> dict[str, Any]:
    r = await client.post("/api/account/api-tokens", json=body, headers=account.headers)
    assert r.status_code == 201, r.text
    created: dict[str, Any] = r.json()
    return created


async def list_tokens(client: httpx.AsyncClient, account: Account) -> list[dict[str, Any]]:
    r = await client.get("/api/account/api-tokens", headers=account.headers)
    assert r.status_code == 200, r.text
    assert set(r.json()) == {"apiTokens"}
    tokens: list[dict[str, Any]] = r.json()["apiTokens"]
    return tokens


async def test_create_api_token_answers_201_with_the_secret(
    client: httpx.AsyncClient, owner: Account, clock: FrozenClock
) -> None:
    r = await client.post("/api/account/api-tokens", json={"name": "CI"}, headers=owner.headers)

    assert r.status_code == 201, r.text
    body = r.json()
    assert set(body) == API_TOKEN_FIELDS | {"token"}
    assert body["id"]
    assert body["name"] == "CI"
    assert body["createdAt"] == iso_z(clock.now())
    assert body["expiresAt"] is None
    assert body["lastUsedAt"] is None
    secret = body["token"]
    assert secret.startswith("bb_")
    assert len(secret) >= len("bb_") + 22  # at least 128 bits in URL-safe base64
    # The prefix recognises the token without giving much of it away.
    assert body["prefix"].startswith("bb_")
    assert secret.startswith(body["prefix"])
    assert len(secret) - len(body["prefix"]) >= 22


async def test_each_api_token_has_its_own_secret(client: httpx.AsyncClient, owner: Account) -> None:
    first = await create_token(client, owner, name="CI")
    second = await create_token(client, owner, name="CI")

    assert first["id"] != second["id"]
    assert first["token"] != second["token"]


async def test_the_list_of_api_tokens_never_shows_the_secret(
    client: httpx.AsyncClient, owner: Account
) -> None:
    created = await create_token(client, owner, name="CI", expiresInDays=30)

    r = await client.get("/api/account/api-tokens", headers=owner.headers)

    assert r.status_code == 200, r.text
    [listed] = r.json()["apiTokens"]
    assert set(listed) == API_TOKEN_FIELDS  # no token, no hash
    assert listed == {k: v for k, v in created.items() if k != "token"}
    assert created["token"] not in r.text
    assert created["token"][len(created["prefix"]) :] not in r.text
    assert "token_hash" not in r.text
    assert "tokenHash" not in r.text


async def test_an_api_token_is_stored_only_as_a_hash(
    client: httpx.AsyncClient, app: FastAPI, owner: Account
) -> None:
    created = await create_token(client, owner, name="CI")
    secret = created["token"]

    values = await stored_values(app, ApiToken)

    assert created["id"] in values
    assert not [v for v in values if secret[len(created["prefix"]) :] in v]


async def test_the_list_of_api_tokens_is_newest_first_and_only_the_callers(
    client: httpx.AsyncClient, api: Api, owner: Account
) -> None:
    other = await api.register("other@example.com")
    await create_token(client, other, name="theirs")
    older = await create_token(client, owner, name="older")
    newer = await create_token(client, owner, name="newer")

    assert [t["id"] for t in await list_tokens(client, owner)] == [newer["id"], older["id"]]


async def test_an_api_token_works_as_a_bearer_token_on_resource_endpoints(
    client: httpx.AsyncClient, api: Api, owner: Account
) -> None:
    project = await api.project(owner, "Acme")
    token = (await create_token(client, owner, name="CI"))["token"]

    r = await client.get("/api/projects", headers=bearer(token))

    assert r.status_code == 200, r.text
    assert [p["id"] for p in r.json()["projects"]] == [project["id"]]
    r = await client.post("/api/projects", json={"name": "From CI"}, headers=bearer(token))
    assert r.status_code == 201, r.text
    r = await client.get("/api/auth/me", headers=bearer(token))
    assert r.status_code == 200, r.text
    assert r.json()["id"] == owner.user["id"]


async def test_using_an_api_token_sets_last_used_at(
    client: httpx.AsyncClient, owner: Account, clock: FrozenClock
) -> None:
    token = (await create_token(client, owner, name="CI"))["token"]
    clock.advance(minutes=5)
    first_use = clock.now()

    assert (await client.get("/api/projects", headers=bearer(token))).status_code == 200

    [listed] = await list_tokens(client, owner)
    assert listed["lastUsedAt"] == iso_z(first_use)
    clock.advance(hours=2)
    assert (await client.get("/api/projects", headers=bearer(token))).status_code == 200
    [listed] = await list_tokens(client, owner)
    assert listed["lastUsedAt"] == iso_z(clock.now())


async def test_a_deleted_api_token_answers_401(client: httpx.AsyncClient, owner: Account) -> None:
    created = await create_token(client, owner, name="CI")

    r = await client.delete(f"/api/account/api-tokens/{created['id']}", headers=owner.headers)

    assert r.status_code == 204, r.text
    assert r.content == b""
    r = await client.get("/api/projects", headers=bearer(created["token"]))
    assert_problem(r, 401, "invalid_token")
    assert r.headers["WWW-Authenticate"] == "Bearer"
    assert await list_tokens(client, owner) == []


async def test_deleting_an_api_token_twice_answers_404(
    client: httpx.AsyncClient, owner: Account
) -> None:
    created = await create_token(client, owner, name="CI")
    await client.delete(f"/api/account/api-tokens/{created['id']}", headers=owner.headers)

    r = await client.delete(f"/api/account/api-tokens/{created['id']}", headers=owner.headers)

    assert_problem(r, 404, "api_token_not_found")


async def test_deleting_an_unknown_api_token_answers_404(
    client: httpx.AsyncClient, owner: Account
) -> None:
    r = await client.delete("/api/account/api-tokens/tok_unknown", headers=owner.headers)

    assert_problem(r, 404, "api_token_not_found")


async def test_another_users_api_token_cannot_be_deleted_and_looks_unknown(
    client: httpx.AsyncClient, api: Api, owner: Account
) -> None:
    mallory = await api.register("mallory@example.com")
    created = await create_token(client, owner, name="CI")

    r = await client.delete(f"/api/account/api-tokens/{created['id']}", headers=mallory.headers)

    body = assert_problem(r, 404, "api_token_not_found")
    unknown = await client.delete("/api/account/api-tokens/tok_unknown", headers=mallory.headers)
    assert body["detail"] == unknown.json()["detail"]
    assert (await client.get("/api/auth/me", headers=bearer(created["token"]))).status_code == 200


async def test_api_tokens_need_a_valid_bearer_token(client: httpx.AsyncClient) -> None:
    for r in (
        await client.get("/api/account/api-tokens"),
        await client.post("/api/account/api-tokens", json={"name": "CI"}),
        await client.delete("/api/account/api-tokens/tok_unknown"),
    ):
        assert_problem(r, 401, "not_authenticated")
        assert r.headers["WWW-Authenticate"] == "Bearer"


async def test_an_unknown_api_token_answers_401(client: httpx.AsyncClient, owner: Account) -> None:
    r = await client.get("/api/projects", headers=bearer("bb_" + "A" * 43))

    assert_problem(r, 401, "invalid_token")
    assert r.headers["WWW-Authenticate"] == "Bearer"


@pytest.mark.parametrize("days", [1, 365])
async def test_expires_in_days_from_1_to_365_sets_expires_at(
    client: httpx.AsyncClient, owner: Account, clock: FrozenClock, days: int
) -> None:
    created = await create_token(client, owner, name="CI", expiresInDays=days)

    assert created["expiresAt"] == iso_z(clock.now() + timedelta(days=days))


@pytest.mark.parametrize("days", [0, -1, 366, "7 days", 1.5])
async def test_expires_in_days_outside_1_to_365_is_422(
    client: httpx.AsyncClient, owner: Account, days: object
) -> None:
    r = await client.post(
        "/api/account/api-tokens",
        json={"name": "CI", "expiresInDays": days},
        headers=owner.headers,
    )

    body = assert_problem(r, 422, "validation_error")
    assert [e["field"] for e in body["errors"]] == ["expiresInDays"]
    assert await list_tokens(client, owner) == []


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "name"),
        ({"name": ""}, "name"),
        ({"name": "x" * 101}, "name"),
        ({"name": "CI", "expires_in_days": 5}, "expires_in_days"),
        ({"name": "CI", "lastUsedAt": None}, "lastUsedAt"),
    ],
    ids=["missing name", "empty name", "long name", "snake_case field", "read-only field"],
)
async def test_create_api_token_with_an_invalid_body_is_422(
    client: httpx.AsyncClient, owner: Account, body: dict[str, Any], field: str
) -> None:
    r = await client.post("/api/account/api-tokens", json=body, headers=owner.headers)

    problem = assert_problem(r, 422, "validation_error")
    assert [e["field"] for e in problem["errors"]] == [field]


async def test_an_api_token_expires_after_expires_in_days(
    client: httpx.AsyncClient, owner: Account, clock: FrozenClock
) -> None:
    token = (await create_token(client, owner, name="CI", expiresInDays=1))["token"]
    clock.advance(hours=23, minutes=59)
    assert (await client.get("/api/projects", headers=bearer(token))).status_code == 200

    clock.advance(minutes=1)
    r = await client.get("/api/projects", headers=bearer(token))

    assert_problem(r, 401, "token_expired")
    assert r.headers["WWW-Authenticate"] == "Bearer"


async def test_an_api_token_without_expiry_outlives_the_login_that_created_it(
    client: httpx.AsyncClient, owner: Account, clock: FrozenClock
) -> None:
    token = (await create_token(client, owner, name="CI"))["token"]
    await client.post("/api/auth/logout", headers=owner.headers)

    clock.advance(days=400)

    r = await client.get("/api/projects", headers=bearer(token))
    assert r.status_code == 200, r.text

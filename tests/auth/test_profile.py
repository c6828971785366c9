"""GET and PUT /api/auth/me: the caller's name and whether they get new-build mails."""

from __future__ import annotations

import httpx
import pytest

from tests.conftest import Account, Api, assert_problem


async def test_new_accounts_get_new_build_mails_and_can_turn_them_off_and_on(
    client: httpx.AsyncClient, owner: Account, api: Api
) -> None:
    r = await client.get("/api/auth/me", headers=owner.headers)
    assert r.json()["notifyNewBuilds"] is True

    r = await client.put("/api/auth/me", json={"notifyNewBuilds": False}, headers=owner.headers)

    assert r.status_code == 200, r.text
    body = r.json()
    assert body["notifyNewBuilds"] is False
    assert body["name"] == owner.user["name"]  # left out: kept
    assert body["usage"] == {"storageBytes": 0, "builds": 0}
    r = await client.get("/api/auth/me", headers=(await api.login(owner)).headers)
    assert r.json()["notifyNewBuilds"] is False

    r = await client.put(
        "/api/auth/me", json={"notifyNewBuilds": True, "name": "  Olive  "}, headers=owner.headers
    )
    assert (r.json()["notifyNewBuilds"], r.json()["name"]) == (True, "Olive")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"notifyNewBuilds": "no"}, "notifyNewBuilds"),
        ({"notifyNewBuilds": 0}, "notifyNewBuilds"),
        ({"name": None}, "name"),
        ({"name": "   "}, "name"),
        ({"plan": "enterprise"}, "plan"),
        ({"email": "other@example.com"}, "email"),
    ],
)
async def test_what_put_me_refuses(
    client: httpx.AsyncClient, owner: Account, body: dict[str, object], field: str
) -> None:
    r = await client.put("/api/auth/me", json=body, headers=owner.headers)

    problem = assert_problem(r, 422, "validation_error")
    assert [e["field"] for e in problem["errors"]] == [field]
    r = await client.get("/api/auth/me", headers=owner.headers)
    assert (r.json()["plan"], r.json()["notifyNewBuilds"]) == ("free", True)

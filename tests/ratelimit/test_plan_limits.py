"""Requests per minute by plan: free 100, pro 1000, enterprise unlimited; anonymous per IP."""

from __future__ import annotations

import asyncio

import httpx

from buildbay.auth.cache import ACCESS_CACHE_TTL
from buildbay.clock import FrozenClock
from buildbay.config import Plan
from tests.conftest import Account, Api, assert_problem
from tests.ratelimit.conftest import ClientAt, SetPlan, ratelimit

FREE_POLICY = '"free";q=100;w=60'
PRO_POLICY = '"pro";q=1000;w=60'
BATCH = 50  # requests in flight at once: much faster than one by one


async def send(
    client: httpx.AsyncClient, count: int, headers: dict[str, str] | None = None
) -> list[httpx.Response]:
    """`count` GET /api/auth/me, BATCH at a time (the cheapest request that checks a token)."""
    responses: list[httpx.Response] = []
    for start in range(0, count, BATCH):
        batch = min(BATCH, count - start)
        responses += await asyncio.gather(
            *(client.get("/api/auth/me", headers=headers) for _ in range(batch))
        )
    return responses


def assert_rate_limited(r: httpx.Response, policy: str) -> None:
    assert_problem(r, 429, "rate_limited")
    assert 1 <= int(r.headers["Retry-After"]) <= 60
    assert r.headers["RateLimit-Policy"] == policy
    assert ratelimit(r).remaining == 0


async def test_free_plan_counts_down_100_requests_in_ratelimit_headers(
    client: httpx.AsyncClient, owner: Account
) -> None:
    for i in range(100):
        r = await client.get("/api/auth/me", headers=owner.headers)

        assert r.status_code == 200, r.text
        assert r.headers["RateLimit-Policy"] == FREE_POLICY
        header = ratelimit(r)
        assert header.policy == "free"
        assert header.remaining == 99 - i
        assert 0 <= header.reset <= 60


async def test_the_101st_request_in_a_minute_of_a_free_user_answers_429(
    client: httpx.AsyncClient, api: Api, owner: Account
) -> None:
    responses = await send(client, 100, owner.headers)
    assert [r.status_code for r in responses] == [200] * 100

    r = await client.get("/api/auth/me", headers=owner.headers)

    assert_rate_limited(r, FREE_POLICY)
    # Every endpoint of that user is refused, not only the one that was hammered.
    assert_rate_limited(
        await client.post("/api/projects", json={"name": "Acme"}, headers=owner.headers),
        FREE_POLICY,
    )
    # Another user has a budget of their own.
    other = await api.register("other@example.com")
    r = await client.get("/api/auth/me", headers=other.headers)
    assert r.status_code == 200, r.text
    assert ratelimit(r).remaining == 99


async def test_all_tokens_of_a_user_share_one_budget(
    client: httpx.AsyncClient, owner: Account
) -> None:
    r = await client.post("/api/account/api-tokens", json={"name": "CI"}, headers=owner.headers)
    api_token = {"Authorization": f"Bearer {r.json()['token']}"}
    assert ratelimit(r).remaining == 99

    await send(client, 49, owner.headers)
    r = await client.get("/api/auth/me", headers=api_token)
    assert ratelimit(r).remaining == 49
    await send(client, 49, api_token)

    assert (await client.get("/api/auth/me", headers=owner.headers)).status_code == 429
    assert_rate_limited(await client.get("/api/auth/me", headers=api_token), FREE_POLICY)


async def test_pro_plan_allows_1000_requests_a_minute(
    client: httpx.AsyncClient, owner: Account, set_plan: SetPlan
) -> None:
    await set_plan(owner, Plan.PRO)

    responses = await send(client, 1000, owner.headers)

    assert {r.status_code for r in responses} == {200}
    assert {r.headers["RateLimit-Policy"] for r in responses} == {PRO_POLICY}
    assert min(ratelimit(r).remaining for r in responses) == 0
    assert_rate_limited(await client.get("/api/auth/me", headers=owner.headers), PRO_POLICY)


async def test_enterprise_plan_has_no_limit_and_no_ratelimit_headers(
    client: httpx.AsyncClient, owner: Account, set_plan: SetPlan
) -> None:
    await set_plan(owner, Plan.ENTERPRISE)

    responses = await send(client, 1100, owner.headers)

    assert {r.status_code for r in responses} == {200}
    assert not any("RateLimit" in r.headers or "RateLimit-Policy" in r.headers for r in responses)


async def test_a_plan_change_applies_once_the_cached_lookup_expires(
    client: httpx.AsyncClient, owner: Account, set_plan: SetPlan, clock: FrozenClock
) -> None:
    await send(client, 100, owner.headers)
    assert_rate_limited(await client.get("/api/auth/me", headers=owner.headers), FREE_POLICY)

    await set_plan(owner, Plan.PRO)
    # The change is made outside the API (as by `buildbay users set-plan` in another process),
    # so the token lookup cached by the requests above may keep the old plan that long.
    clock.advance(seconds=ACCESS_CACHE_TTL.total_seconds())
    r = await client.get("/api/auth/me", headers=owner.headers)

    assert r.status_code == 200, r.text
    assert r.json()["plan"] == "pro"
    assert r.headers["RateLimit-Policy"] == PRO_POLICY


async def test_requests_without_a_valid_token_are_counted_per_ip_at_the_free_rate(
    client: httpx.AsyncClient, api: Api, client_at: ClientAt
) -> None:
    account = await api.register("ada@example.com")  # register is counted per IP too: 1
    for i in range(99):
        headers = {"Authorization": "Bearer not-a-token"} if i % 2 else None
        r = await client.get("/api/auth/me", headers=headers)

        assert_problem(r, 401)
        assert r.headers["RateLimit-Policy"] == FREE_POLICY
        assert ratelimit(r).remaining == 98 - i

    assert_rate_limited(await client.get("/api/auth/me"), FREE_POLICY)
    assert_rate_limited(
        await client.post(
            "/api/auth/login", json={"email": account.email, "password": account.password}
        ),
        FREE_POLICY,
    )
    # Another address has its own budget.
    r = await (await client_at("192.0.2.7")).get("/api/auth/me")
    assert_problem(r, 401, "not_authenticated")
    assert ratelimit(r).remaining == 99
    # A valid token is counted for its user, not for the address it comes from.
    r = await client.get("/api/auth/me", headers=account.headers)
    assert r.status_code == 200, r.text
    assert ratelimit(r).remaining == 99


async def test_the_storage_upload_is_not_counted(
    client: httpx.AsyncClient, api: Api, owner: Account
) -> None:
    project = await api.project(owner)
    app = await api.application(owner, project["id"])
    r = await client.post(
        f"/api/app-distribution/{project['id']}/{app['id']}/builds/upload-link",
        json={"fileName": "app.apk", "fileSize": 4},
        headers=owner.headers,
    )
    link = r.json()
    await send(client, 100 - 3, owner.headers)  # the user's budget is spent ...
    await send(client, 99)  # ... and so is the address's (register counted 1)
    assert (await client.get("/api/auth/me", headers=owner.headers)).status_code == 429
    assert (await client.get("/api/auth/me")).status_code == 429

    r = await client.put(link["uploadUrl"], content=b"PK\x03\x04", headers=link["uploadHeaders"])

    assert r.status_code == 200, r.text
    assert "RateLimit" not in r.headers

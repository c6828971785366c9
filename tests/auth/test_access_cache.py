"""The access-token lookup is remembered for seconds, never past a revocation."""

from __future__ import annotations

import httpx
from fastapi import FastAPI
from sqlalchemy import update

from buildbay.auth.cache import ACCESS_CACHE_TTL
from buildbay.auth.models import User
from buildbay.clock import FrozenClock
from buildbay.config import Plan
from tests.conftest import Account, assert_problem


async def test_logout_is_refused_at_once_even_right_after_a_cached_request(
    client: httpx.AsyncClient, owner: Account, app: FastAPI
) -> None:
    assert app.state.ctx.access_cache is not None  # the embedded default caches
    assert (await client.get("/api/auth/me", headers=owner.headers)).status_code == 200

    assert (await client.post("/api/auth/logout", headers=owner.headers)).status_code == 204

    assert_problem(await client.get("/api/auth/me", headers=owner.headers), 401, "token_revoked")


async def test_refresh_token_reuse_revokes_cached_access_tokens_at_once(
    client: httpx.AsyncClient, owner: Account
) -> None:
    assert (await client.get("/api/auth/me", headers=owner.headers)).status_code == 200
    r = await client.post("/api/auth/refresh-token", json={"refresh_token": owner.refresh_token})
    assert r.status_code == 200
    new_headers = {"Authorization": f"Bearer {r.json()['access_token']}"}
    assert (await client.get("/api/auth/me", headers=new_headers)).status_code == 200

    r = await client.post("/api/auth/refresh-token", json={"refresh_token": owner.refresh_token})
    assert_problem(r, 401, "refresh_token_reused")

    assert_problem(await client.get("/api/auth/me", headers=new_headers), 401, "token_revoked")


async def test_a_plan_changed_outside_the_api_shows_within_the_cache_lifetime(
    client: httpx.AsyncClient, owner: Account, app: FastAPI, clock: FrozenClock
) -> None:
    assert (await client.get("/api/auth/me", headers=owner.headers)).json()["plan"] == "free"
    async with app.state.ctx.sessions() as db, db.begin():
        await db.execute(update(User).where(User.id == owner.user["id"]).values(plan=Plan.PRO))

    clock.advance(seconds=ACCESS_CACHE_TTL.total_seconds())

    assert (await client.get("/api/auth/me", headers=owner.headers)).json()["plan"] == "pro"

"""The access-token lookup is remembered for seconds, never past a revocation."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx
from fastapi import FastAPI
from sqlalchemy import update

from buildbay.app import create_app
from buildbay.auth.cache import ACCESS_CACHE_TTL, AccessTokenCache, CachedAccess
from buildbay.auth.models import User
from buildbay.auth.tokens import AccessClaims
from buildbay.clock import FrozenClock
from buildbay.config import Plan, Settings
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


async def test_the_cache_is_left_out_when_redis_means_several_processes(
    settings: Settings,
) -> None:
    # Revocations are only heard of in the process that made them: another process could keep
    # accepting a logged-out token for the cache's lifetime.
    app = create_app(
        settings.model_copy(update={"redis_url": "redis://127.0.0.1:1/0"}), migrate_on_start=False
    )

    assert app.state.ctx.access_cache is None
    await app.state.ctx.engine.dispose()


def _entry(session_id: str, stored_at: datetime) -> CachedAccess:
    claims = AccessClaims("usr_1", session_id, "jti", stored_at + timedelta(days=1))
    return CachedAccess(claims, User(id="usr_1"), stored_at)


def test_a_lookup_that_ran_while_a_session_was_revoked_is_not_stored() -> None:
    cache, now = AccessTokenCache(), datetime.now(UTC)
    generation = cache.generation  # read before the lookup's query

    cache.forget_session("ses_other")  # a revocation commits while the query runs
    cache.put("token", _entry("ses_1", now), generation)

    assert cache.get("token", now) is None


def test_forgetting_a_session_drops_every_token_of_it_and_only_those() -> None:
    cache, now = AccessTokenCache(), datetime.now(UTC)
    cache.put("a1", _entry("ses_a", now), cache.generation)
    cache.put("a2", _entry("ses_a", now), cache.generation)
    cache.put("b", _entry("ses_b", now), cache.generation)

    cache.forget_session("ses_a")

    assert cache.get("a1", now) is None
    assert cache.get("a2", now) is None
    assert cache.get("b", now) is not None


def test_an_entry_lives_less_than_the_ttl_and_not_across_a_clock_set_back() -> None:
    cache, now = AccessTokenCache(), datetime.now(UTC)
    cache.put("token", _entry("ses_1", now), cache.generation)

    assert cache.get("token", now + ACCESS_CACHE_TTL - timedelta(microseconds=1)) is not None
    assert cache.get("token", now + ACCESS_CACHE_TTL) is None
    cache.put("token", _entry("ses_1", now), cache.generation)
    assert cache.get("token", now - timedelta(seconds=1)) is None


def test_a_full_cache_drops_its_oldest_entry() -> None:
    cache, now = AccessTokenCache(max_entries=2), datetime.now(UTC)
    for token in ("first", "second", "third"):
        cache.put(token, _entry("ses_1", now), cache.generation)

    assert cache.get("first", now) is None
    assert cache.get("second", now) is not None
    assert cache.get("third", now) is not None

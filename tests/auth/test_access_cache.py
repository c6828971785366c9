"""The access-token lookup is remembered for seconds, never past a revocation."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.app import create_app
from buildbay.auth.cache import ACCESS_CACHE_TTL, AccessTokenCache, CachedAccess
from buildbay.auth.dependencies import account_service, login_service
from buildbay.auth.models import User
from buildbay.auth.reads import UserRecord
from buildbay.auth.tokens import AccessClaims
from buildbay.clock import FrozenClock
from buildbay.config import Plan, Settings
from buildbay.context import AppContext
from buildbay.db.engine import finish
from tests.conftest import BASE_URL, Account, Api, assert_problem, statements_run


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


def _end_the_login(ctx: AppContext, db: AsyncSession, cached: CachedAccess) -> Awaitable[None]:
    return login_service(ctx, db).end_session(cached.claims.session_id)


def _take_the_account_back(
    ctx: AppContext, db: AsyncSession, cached: CachedAccess
) -> Awaitable[None]:
    return account_service(ctx, db).end_every_credential(cached.user.id)


@pytest.mark.parametrize("revoke", [_end_the_login, _take_the_account_back])
async def test_a_revocation_is_forgotten_by_the_cache_only_once_it_commits(
    client: httpx.AsyncClient,
    owner: Account,
    app: FastAPI,
    revoke: Callable[[AppContext, AsyncSession, CachedAccess], Awaitable[None]],
) -> None:
    ctx: AppContext = app.state.ctx
    cache = ctx.access_cache
    assert cache is not None
    assert (await client.get("/api/auth/me", headers=owner.headers)).status_code == 200
    now = ctx.clock.now()
    cached = cache.get(owner.access_token, now)
    assert cached is not None

    for commits in (False, True):
        db = ctx.sessions()
        await revoke(ctx, db, cached)
        assert cache.get(owner.access_token, now) is cached  # not before the commit
        await finish(db, ok=commits)
        assert (cache.get(owner.access_token, now) is None) is commits, commits

    assert_problem(await client.get("/api/auth/me", headers=owner.headers), 401, "token_revoked")


async def test_a_plan_changed_outside_the_api_shows_within_the_cache_lifetime(
    client: httpx.AsyncClient, owner: Account, app: FastAPI, clock: FrozenClock
) -> None:
    assert (await client.get("/api/auth/me", headers=owner.headers)).json()["plan"] == "free"
    async with app.state.ctx.sessions() as db, db.begin():
        await db.execute(update(User).where(User.id == owner.user["id"]).values(plan=Plan.PRO))

    clock.advance(seconds=ACCESS_CACHE_TTL.total_seconds())

    assert (await client.get("/api/auth/me", headers=owner.headers)).json()["plan"] == "pro"


def session_lookups(app: FastAPI) -> list[str]:
    """The statements `app` runs from now on that look a login session up."""
    return statements_run(app, "JOIN sessions")


async def test_with_redis_a_logout_in_one_process_is_refused_at_once_by_another_s_cache(
    two_processes: list[tuple[FastAPI, httpx.AsyncClient]],
) -> None:
    (_, one), (two_app, two) = two_processes
    owner = await Api(one).register()
    lookups = session_lookups(two_app)
    for _ in range(3):
        assert (await two.get("/api/auth/me", headers=owner.headers)).status_code == 200
    assert len(lookups) == 1  # the other two came from the cache (the clock is frozen)

    assert (await one.post("/api/auth/logout", headers=owner.headers)).status_code == 204

    assert_problem(await two.get("/api/auth/me", headers=owner.headers), 401, "token_revoked")


async def test_with_redis_a_password_change_is_refused_at_once_by_another_s_cache(
    two_processes: list[tuple[FastAPI, httpx.AsyncClient]],
) -> None:
    (_, one), (_, two) = two_processes
    api = Api(one)
    owner = await api.register()
    other_login = await api.login(owner)
    assert (await two.get("/api/auth/me", headers=other_login.headers)).status_code == 200

    changed = await one.post(
        "/api/auth/change-password",
        json={"currentPassword": owner.password, "newPassword": "a new passphrase"},
        headers=owner.headers,
    )
    assert changed.status_code == 204

    refused = await two.get("/api/auth/me", headers=other_login.headers)
    assert_problem(refused, 401, "token_revoked")
    assert (await two.get("/api/auth/me", headers=owner.headers)).status_code == 200


async def test_with_redis_a_reused_refresh_token_is_refused_at_once_by_another_s_cache(
    two_processes: list[tuple[FastAPI, httpx.AsyncClient]],
) -> None:
    # The revocation commits, then the request fails: the others hear of it all the same.
    (_, one), (_, two) = two_processes
    owner = await Api(one).register()
    assert (await two.get("/api/auth/me", headers=owner.headers)).status_code == 200
    body = {"refresh_token": owner.refresh_token}
    assert (await one.post("/api/auth/refresh-token", json=body)).status_code == 200

    assert_problem(
        await one.post("/api/auth/refresh-token", json=body), 401, "refresh_token_reused"
    )

    assert_problem(await two.get("/api/auth/me", headers=owner.headers), 401, "token_revoked")


async def test_with_redis_unreachable_every_request_looks_its_session_up(
    settings: Settings, clock: FrozenClock, api: Api
) -> None:
    # Nothing listens on port 1: the marks cannot be read, so the cache is not trusted.
    app = create_app(
        settings.model_copy(update={"redis_url": "redis://127.0.0.1:1/0"}),
        clock=clock,
        migrate_on_start=False,
    )
    owner = await api.register()
    lookups = session_lookups(app)
    transport = httpx.ASGITransport(app=app)
    try:
        async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as client:
            for _ in range(3):
                assert (await client.get("/api/auth/me", headers=owner.headers)).status_code == 200
            assert (await client.post("/api/auth/logout", headers=owner.headers)).status_code == 204
            refused = await client.get("/api/auth/me", headers=owner.headers)
    finally:
        await app.state.ctx.dispose()

    assert len(lookups) == 5  # every request: three reads, the logout, the refused read
    assert_problem(refused, 401, "token_revoked")


def _entry(session_id: str, stored_at: datetime, user_id: str = "usr_1") -> CachedAccess:
    claims = AccessClaims(user_id, session_id, "jti", stored_at + timedelta(days=1))
    user = UserRecord(
        user_id, "ada@example.com", "Ada", Plan.FREE, stored_at, stored_at, True, None, 0
    )
    return CachedAccess(claims, user, stored_at)


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


def test_forgetting_a_user_drops_every_token_of_theirs_and_what_runs_meanwhile() -> None:
    """A password reset: every session of the user, those the reset could not name too."""
    cache, now = AccessTokenCache(), datetime.now(UTC)
    cache.put("a", _entry("ses_a", now), cache.generation)
    cache.put("a2", _entry("ses_a2", now), cache.generation)
    cache.put("b", _entry("ses_b", now, user_id="usr_2"), cache.generation)
    generation = cache.generation  # a lookup running while the reset commits

    cache.forget_user("usr_1")
    cache.put("a3", _entry("ses_a3", now), generation)

    assert [cache.get(t, now) for t in ("a", "a2", "a3")] == [None, None, None]
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

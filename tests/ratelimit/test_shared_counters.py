"""With BUILDBAY_REDIS_URL the request counters live in Redis, shared by every server process."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator

import httpx
import redis.asyncio as redis

from buildbay import redis_pool
from buildbay.app import create_app
from buildbay.clock import FrozenClock
from buildbay.config import Settings
from buildbay.redis_pool import CONNECTIONS
from tests.conftest import BASE_URL, redis_clients

RATE_LIMIT = re.compile(r'"free";r=(\d+);t=\d+')


def _remaining(response: httpx.Response) -> int:
    match = RATE_LIMIT.fullmatch(response.headers["RateLimit"])
    assert match is not None, response.headers["RateLimit"]
    return int(match[1])


@contextlib.asynccontextmanager
async def _client(settings: Settings, clock: FrozenClock) -> AsyncIterator[httpx.AsyncClient]:
    """One more server process, as far as shared state goes: its own app, engine and limiter."""
    app = create_app(settings, clock=clock, migrate_on_start=False)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as client:
        yield client
    await app.state.ctx.dispose()


async def test_two_processes_share_one_request_budget(
    settings: Settings, clock: FrozenClock, redis_url: str
) -> None:
    settings = settings.model_copy(update={"redis_url": redis_url})
    async with _client(settings, clock) as one, _client(settings, clock) as two:
        r = await one.post(
            "/api/auth/register", json={"email": "busy@example.com", "password": "12345678"}
        )
        headers = {"Authorization": f"Bearer {r.json()['access_token']}"}
        statuses = []
        for i in range(100):
            statuses.append(
                (await (one if i % 2 else two).get("/api/auth/me", headers=headers)).status_code
            )
        assert statuses == [200] * 100
        r = await one.get("/api/auth/me", headers=headers)
        assert r.status_code == 429, r.text
        assert r.json()["code"] == "rate_limited"
        assert int(r.headers["Retry-After"]) >= 1
        assert r.headers["RateLimit"].startswith('"free";r=0;t=')


async def test_an_unreachable_redis_fails_open_and_readyz_says_so(
    settings: Settings, clock: FrozenClock
) -> None:
    settings = settings.model_copy(update={"redis_url": "redis://127.0.0.1:1/0"})
    async with _client(settings, clock) as client:
        r = await client.post(
            "/api/auth/register", json={"email": "open@example.com", "password": "12345678"}
        )
        assert r.status_code == 201, r.text
        r = await client.get(
            "/api/auth/me", headers={"Authorization": f"Bearer {r.json()['access_token']}"}
        )
        assert r.status_code == 200
        assert "RateLimit" not in r.headers
        r = await client.get("/readyz")
        assert r.status_code == 200
        assert r.json()["checks"]["rateLimitStore"] == "degraded"


async def test_after_a_failed_count_requests_go_uncounted_a_moment_without_asking_redis(
    settings: Settings, clock: FrozenClock
) -> None:
    # While Redis hangs, every count would wait out the client's timeout (a second): after one
    # does, the requests of the next SKIP_SECONDS, on the app's clock, are served without
    # asking. The update check counts its caller's IP before it looks at the key.
    settings = settings.model_copy(update={"redis_url": "redis://127.0.0.1:1/0"})
    app = create_app(settings, clock=clock, migrate_on_start=False)
    counters = app.state.ctx.limiter
    try:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as client:

            async def check() -> None:
                r = await client.get("/api/updates/check", params={"key": "bbu_unknown"})
                assert r.status_code == 404, r.text
                assert r.json()["code"] == "unknown_update_key"
                assert "RateLimit" not in r.headers

            await check()
            assert counters.store_failures == 1
            for _ in range(3):
                await check()
            clock.advance(seconds=redis_pool.SKIP_SECONDS - 1)
            await check()
            assert counters.store_failures == 1  # not asked
            clock.advance(seconds=1)
            await check()
            assert counters.store_failures == 2  # asked again, and failed again
            await check()
            assert counters.store_failures == 2  # and left alone again
    finally:
        await app.state.ctx.dispose()


async def test_concurrent_requests_on_two_processes_each_see_their_own_remaining_count(
    settings: Settings, clock: FrozenClock, redis_url: str
) -> None:
    """The remaining count comes from the same step as the request's count: 60 requests sent
    at once through two processes read 60 different counts, none of them 0 (the limit is 100)."""
    settings = settings.model_copy(update={"redis_url": redis_url})
    async with _client(settings, clock) as one, _client(settings, clock) as two:
        r = await one.post(
            "/api/auth/register", json={"email": "racing@example.com", "password": "12345678"}
        )
        headers = {"Authorization": f"Bearer {r.json()['access_token']}"}

        answers = await asyncio.gather(
            *((one if i % 2 else two).get("/api/auth/me", headers=headers) for i in range(60))
        )

        assert [r.status_code for r in answers] == [200] * 60
        remaining = [_remaining(r) for r in answers]
        assert sorted(remaining) == list(range(40, 100)), sorted(remaining)


async def test_a_burst_of_requests_takes_turns_on_a_few_redis_connections(
    settings: Settings, clock: FrozenClock, redis_url: str
) -> None:
    """60 requests at once on one process count through at most CONNECTIONS connections
    (a count is a fraction of a millisecond), not one connection each: opening 60 at once
    under load made some time out, and those requests went uncounted."""
    settings = settings.model_copy(update={"redis_url": redis_url})
    watcher = redis.Redis.from_url(redis_url)
    try:
        async with _client(settings, clock) as one:
            r = await one.post(
                "/api/auth/register", json={"email": "burst@example.com", "password": "12345678"}
            )
            headers = {"Authorization": f"Bearer {r.json()['access_token']}"}
            before = await redis_clients(watcher)

            answers = await asyncio.gather(
                *(one.get("/api/auth/me", headers=headers) for _ in range(60))
            )

            assert [r.status_code for r in answers] == [200] * 60
            assert sorted(_remaining(r) for r in answers) == list(range(40, 100))
            opened = await redis_clients(watcher) - before
            assert opened <= CONNECTIONS, opened
    finally:
        await watcher.aclose()

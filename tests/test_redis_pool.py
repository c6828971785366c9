"""The process's Redis pool (redis_pool.py): bounded, and waited for in turn; and what its users
do when Redis fails them (`Setbacks`), timed on the app's clock."""

from __future__ import annotations

import asyncio
import logging
import socket

import pytest
import redis.asyncio

from buildbay.clock import FrozenClock
from buildbay.redis_pool import SKIP_SECONDS, WARN_EVERY_SECONDS, FairConnectionPool, Setbacks
from tests.conftest import redis_clients


def pool(url: str, connections: int, timeout: float = 5) -> FairConnectionPool:
    return FairConnectionPool.from_url(url, max_connections=connections, timeout=timeout)


async def test_a_connection_given_back_goes_to_the_command_that_waited_longest(
    redis_url: str,
) -> None:
    # redis-py's own wait hands a connection that comes back to whoever asks first after it,
    # here the holder's next command, asked for in the same turn of the loop, ahead of the
    # command already waiting.
    client = redis.asyncio.Redis.from_pool(pool(redis_url, connections=1))
    gate = redis.asyncio.Redis.from_url(redis_url)
    try:

        async def holder() -> None:
            await client.blpop(["gate"], timeout=5)  # holds the one connection until pushed
            await client.rpush("served", "latecomer")

        holding = asyncio.create_task(holder())
        await asyncio.sleep(0.05)
        waiting = asyncio.create_task(client.rpush("served", "waiting"))
        await asyncio.sleep(0.05)  # it asks, and waits
        await gate.rpush("gate", "go")
        await asyncio.gather(holding, waiting)
        assert await gate.lrange("served", 0, -1) == [b"waiting", b"latecomer"]
    finally:
        await client.aclose()
        await gate.aclose()


async def test_commands_past_the_bound_take_turns_on_its_connections(redis_url: str) -> None:
    client = redis.asyncio.Redis.from_pool(pool(redis_url, connections=3))
    watcher = redis.asyncio.Redis.from_url(redis_url)
    try:
        counts = await asyncio.gather(*(client.incr("counter") for _ in range(60)))
        assert sorted(counts) == list(range(1, 61))
        for i in range(61, 71):  # pipelines give their connection (and its place) back too
            async with client.pipeline(transaction=False) as pipe:
                pipe.incr("counter").get("counter")
                assert await pipe.execute() == [i, str(i).encode()]
        await asyncio.gather(*(client.incr("counter") for _ in range(60)))
        assert await client.get("counter") == b"130"
        assert 1 <= await redis_clients(watcher) <= 3
    finally:
        await client.aclose()
        await watcher.aclose()


async def test_a_command_past_the_bound_waits_at_most_the_pool_s_timeout(redis_url: str) -> None:
    client = redis.asyncio.Redis.from_pool(pool(redis_url, connections=1, timeout=0.2))
    try:
        holding = asyncio.create_task(client.blpop(["gate"], timeout=1))
        await asyncio.sleep(0.05)
        with pytest.raises(redis.ConnectionError, match="No connection available"):
            await client.get("anything")
        assert await holding is None  # BLPOP timed out, and gave the connection back
        assert await client.incr("after") == 1
    finally:
        await client.aclose()


async def test_a_failed_connect_gives_its_place_back() -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    fair = pool(f"redis://127.0.0.1:{port}/0", connections=2, timeout=0.5)
    client = redis.asyncio.Redis.from_pool(fair)
    try:
        # More failures than places: each is the refused connect, never a wait for a place.
        for _ in range(5):
            with pytest.raises(redis.ConnectionError) as failed:
                await client.get("anything")
            assert "No connection available" not in str(failed.value)
    finally:
        await client.aclose()


def test_after_a_setback_redis_is_left_alone_for_skip_seconds_on_the_app_s_clock() -> None:
    clock = FrozenClock()
    setbacks = Setbacks(logging.getLogger("tests.setbacks"), clock)
    assert not setbacks.skipping()

    setbacks.skip()
    assert setbacks.skipping()
    clock.advance(seconds=SKIP_SECONDS - 1)
    assert setbacks.skipping()
    clock.advance(seconds=1)
    assert not setbacks.skipping()


def test_a_redis_that_stays_down_is_logged_once_a_minute(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FrozenClock()
    setbacks = Setbacks(logging.getLogger("tests.setbacks"), clock)
    down = ConnectionError("refused")

    with caplog.at_level(logging.WARNING, logger="tests.setbacks"):
        setbacks.warn("cannot count", down)
        clock.advance(seconds=WARN_EVERY_SECONDS - 1)
        setbacks.warn("cannot count", down)
        clock.advance(seconds=1)
        setbacks.warn("still cannot count", down)

    assert [r.getMessage() for r in caplog.records] == [
        "cannot count: refused",
        "still cannot count: refused",
    ]

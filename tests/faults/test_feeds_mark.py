"""The feeds' mark across processes (feeds/cache.py): a listening process reads no mark from
Redis per request, hears another's write the moment its message arrives, makes up for a lost
message by its own reads, and does without the listener while Redis is down.

Each test has a Redis of its own (`private_redis`), so that it can count the commands the caches
send, set the mark behind their backs, and kill the server."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import redis.asyncio as redis

from buildbay import redis_pool
from buildbay.clock import SystemClock
from buildbay.feeds.cache import MARK_KEY, FeedCache
from tests.faults.conftest import DEADLINE, PrivateRedis

pytestmark = pytest.mark.faults

NEVER = 3600.0  # a listener's poll interval when only its messages may tell it anything


async def until(condition: Callable[[], Any], what: str) -> None:
    """Poll `condition` (a value, or an awaitable of one) until it is true."""
    deadline = time.monotonic() + DEADLINE
    while not await _value(condition()):
        if time.monotonic() > deadline:
            pytest.fail(f"gave up after {DEADLINE:.0f} s waiting for {what}")
        await asyncio.sleep(0.01)


@pytest.fixture
async def clients(private_redis: PrivateRedis) -> AsyncIterator[list[redis.Redis]]:
    """Three clients of the private Redis: two processes' (as redis_pool.py makes them) and
    an onlooker's."""
    made = [redis_pool.connect(private_redis.url) for _ in range(3)]
    yield made
    for client in made:
        await client.aclose()


async def _value(result: Any) -> Any:
    return await result if inspect.isawaitable(result) else result


async def _gets(onlooker: redis.Redis) -> int:
    stats = await onlooker.info("commandstats")
    return int(stats.get("cmdstat_get", {}).get("calls", 0))


async def _remembered(cache: FeedCache) -> Any:
    return cache.get("feed", await cache.mark())


async def test_a_listening_process_reads_no_mark_per_request_and_hears_a_write_at_once(
    clients: list[redis.Redis],
) -> None:
    """Catches: a GET per request left in (the round trip the listener exists to save); a
    write heard only by the listener's next poll, or not at all."""
    one, other, onlooker = clients
    writer, reader = FeedCache(SystemClock(), one), FeedCache(SystemClock(), other)
    reader.start(poll_seconds=NEVER)
    try:
        await until(lambda: reader.listening, "the reader to listen")
        before = await _gets(onlooker)
        for _ in range(500):
            mark = await reader.mark()
        assert await _gets(onlooker) - before == 0
        reader.put("feed", "version 1", mark)
        assert await _remembered(reader) == "version 1"

        await writer.announce()  # a write committed in the other process
        # Only its message can tell the reader: its next poll is an hour away.
        await until(lambda: _gone(reader), "the reader to hear of the write")
        assert reader.listening
    finally:
        await reader.stop()


async def _gone(cache: FeedCache) -> bool:
    return await _remembered(cache) is None


async def test_a_lost_message_is_made_up_for_by_the_listener_s_own_read(
    clients: list[redis.Redis],
) -> None:
    """Catches: a listener that trusts its messages alone, which would keep a stale feed for
    as long as the process lives after one message is lost (redis-py reconnects a dropped
    subscription by itself; what was published meanwhile is gone)."""
    one, _, onlooker = clients
    reader = FeedCache(SystemClock(), one)
    reader.start(poll_seconds=0.2)
    try:
        await until(lambda: reader.listening, "the reader to listen")
        reader.put("feed", "version 1", await reader.mark())
        assert await _remembered(reader) == "version 1"
        await onlooker.set(MARK_KEY, b"a write whose message was lost")
        await until(lambda: _gone(reader), "the reader's poll to see the new mark")
    finally:
        await reader.stop()


async def test_a_dropped_subscription_is_taken_up_again(clients: list[redis.Redis]) -> None:
    """Catches: a listener that stops hearing messages after its connection is dropped."""
    one, other, onlooker = clients
    writer, reader = FeedCache(SystemClock(), one), FeedCache(SystemClock(), other)
    reader.start(poll_seconds=NEVER)
    try:
        await until(lambda: reader.listening, "the reader to listen")
        channel = f"buildbay:feeds-mark:{one.get_connection_kwargs().get('db', 0)}"

        async def subscribers() -> int:
            counts = await onlooker.pubsub_numsub(channel)
            return int(counts[0][1])

        assert await subscribers() == 1
        await onlooker.client_kill_filter(_type="pubsub")
        await until(lambda: _is(subscribers, 1), "the reader to subscribe again")
        reader.put("feed", "version 1", await reader.mark())
        await writer.announce()
        await until(lambda: _gone(reader), "the reader to hear of the write")
    finally:
        await reader.stop()


async def _is(read: Callable[[], Any], value: Any) -> bool:
    return bool(await read() == value)


async def test_without_redis_requests_do_without_the_listener_until_it_returns(
    private_redis: PrivateRedis, clients: list[redis.Redis]
) -> None:
    """Catches: a mark trusted while Redis is gone (a write then would go unheard), and a
    listener that does not come back with Redis."""
    one, other, _ = clients
    writer, reader = FeedCache(SystemClock(), one), FeedCache(SystemClock(), other)
    reader.start(poll_seconds=0.2)
    try:
        await until(lambda: reader.listening, "the reader to listen")
        reader.put("feed", "version 1", await reader.mark())
        private_redis.kill()
        await until(lambda: not reader.listening, "the reader to stop")
        assert await reader.mark() is None  # read from the database, per request

        private_redis.start()  # empty: the mark is gone with it
        await until(lambda: reader.listening, "the reader to listen again")
        assert await _remembered(reader) is None  # nothing stored before the outage serves
        reader.put("feed", "version 2", await reader.mark())
        await writer.announce()
        await until(lambda: _gone(reader), "the reader to hear of a write after the outage")
    finally:
        await reader.stop()

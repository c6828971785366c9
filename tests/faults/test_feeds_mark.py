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
from buildbay.feeds.cache import FeedCache
from tests.faults.conftest import DEADLINE, PrivateRedis

pytestmark = pytest.mark.faults

NEVER = 3600.0  # a listener's ping interval when only its messages may tell it anything


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
    reader.start(ping_seconds=NEVER)
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


async def test_a_mark_published_while_the_subscription_was_down_is_read_when_it_is_back(
    clients: list[redis.Redis],
) -> None:
    """Catches: a listener trusted after its connection failed (what was published meanwhile
    went to no one), or one that subscribes again without reading the mark it missed; a
    listener that stops hearing messages after its connection is dropped."""
    one, other, onlooker = clients
    writer, reader = FeedCache(SystemClock(), one), FeedCache(SystemClock(), other)
    reader.start(ping_seconds=NEVER)
    try:
        await until(lambda: reader.listening, "the reader to listen")
        reader.put("feed", "version 1", await reader.mark())
        assert await _remembered(reader) == "version 1"
        await onlooker.client_kill_filter(_type="pubsub")
        await until(lambda: not reader.listening, "the reader to see its subscription gone")
        await writer.announce()  # heard by no one
        await until(lambda: reader.listening, "the reader to subscribe again")
        assert await _remembered(reader) is None

        reader.put("feed", "version 2", await reader.mark())
        await writer.announce()
        await until(lambda: _gone(reader), "the reader to hear of the next write")
        assert reader.listening
    finally:
        await reader.stop()


async def test_a_subscription_that_stops_answering_is_not_trusted_and_is_replaced(
    private_redis: PrivateRedis, clients: list[redis.Redis]
) -> None:
    """Catches: a listener trusted for good on a connection that went silent without failing
    (a middlebox that dropped it): every write of the other processes would go unheard, and no
    error would say so. The reader reaches Redis through a relay that the test freezes."""
    one, _, _ = clients
    async with FreezingRelay(private_redis.port) as relay:
        reader = FeedCache(SystemClock(), relay.client())
        writer = FeedCache(SystemClock(), one)
        reader.start(ping_seconds=0.1)
        try:
            await until(lambda: reader.listening, "the reader to listen")
            reader.put("feed", "version 1", await reader.mark())
            relay.flowing.clear()
            await writer.announce()  # lost in the relay
            await until(lambda: not reader.listening, "the reader to stop trusting its mark")
            # Still frozen: had the relay flowed again now, the old connection's late pongs
            # could be trusted anew (rightly: nothing on it was lost), and nothing replaced.
            await until(lambda: relay.connections > 2, "the reader to give up the silent one")
            relay.flowing.set()
            await until(lambda: reader.listening, "the reader to listen on a new connection")
            assert await _remembered(reader) is None
        finally:
            await reader.stop()


class FreezingRelay:
    """A TCP relay to 127.0.0.1:`port` that, while `flowing` is clear, passes nothing on either
    way and closes nothing: a connection gone silent. `cut` closes its connections and refuses
    new ones until `mend`: Redis out of reach for those behind it alone."""

    def __init__(self, port: int) -> None:
        self.target = port
        self.flowing = asyncio.Event()
        self.flowing.set()
        self.connections = 0
        self.port = 0
        self._server: asyncio.Server | None = None
        self._pumps: set[asyncio.Task[None]] = set()
        self._open: set[asyncio.StreamWriter] = set()
        self._clients: list[redis.Redis] = []
        self.reachable = True

    def client(self) -> redis.Redis:
        """A client (as redis_pool.py makes them) that reaches Redis through the relay."""
        self._clients.append(redis_pool.connect(f"redis://127.0.0.1:{self.port}/0"))
        return self._clients[-1]

    def cut(self) -> None:
        self.reachable = False
        for stream in self._open:
            stream.close()

    def mend(self) -> None:
        self.reachable = True

    async def __aenter__(self) -> FreezingRelay:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self._server is not None
        for client in self._clients:
            await client.aclose()
        self._server.close()
        for pump in self._pumps:
            pump.cancel()
        await asyncio.gather(*self._pumps, return_exceptions=True)

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self.reachable:
            writer.close()
            return
        self.connections += 1
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target)
        self._open.update((writer, up_writer))
        for pump in (self._pump(reader, up_writer), self._pump(up_reader, writer)):
            task = asyncio.create_task(pump)
            self._pumps.add(task)

    async def _pump(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        try:
            while data := await source.read(65536):
                await self.flowing.wait()
                sink.write(data)
                await sink.drain()
        except OSError:
            pass
        finally:
            sink.close()


async def test_a_write_that_could_not_be_announced_is_announced_once_redis_is_back(
    private_redis: PrivateRedis, clients: list[redis.Redis]
) -> None:
    """Catches: a write whose mark never reached Redis (the writer lost Redis as it committed)
    left unannounced, so that the other processes serve what it changed until their entries'
    TTL."""
    _, other, _ = clients
    async with FreezingRelay(private_redis.port) as relay:
        writer = FeedCache(SystemClock(), relay.client())
        reader = FeedCache(SystemClock(), other)
        writer.start(ping_seconds=0.1)
        reader.start(ping_seconds=NEVER)
        try:
            await until(lambda: writer.listening and reader.listening, "both to listen")
            reader.put("feed", "version 1", await reader.mark())
            relay.cut()  # Redis gone for the writer alone
            await writer.announce()  # fails: nothing reaches Redis
            assert await _remembered(reader) == "version 1"
            relay.mend()
            await until(lambda: _gone(reader), "the writer's listener to announce it after all")
            assert reader.listening  # told by the message, not by a reconnection of its own
        finally:
            await writer.stop()
            await reader.stop()


async def test_without_redis_requests_do_without_the_listener_until_it_returns(
    private_redis: PrivateRedis, clients: list[redis.Redis]
) -> None:
    """Catches: a mark trusted while Redis is gone (a write then would go unheard), and a
    listener that does not come back with Redis."""
    one, other, _ = clients
    writer, reader = FeedCache(SystemClock(), one), FeedCache(SystemClock(), other)
    reader.start(ping_seconds=0.2)
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

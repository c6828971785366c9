"""What the feeds answered, remembered until something they are made of changes: a feed's bytes
(and ETag), an update key's application, a download address's file.

A feed request otherwise reads the key, the channel's offered builds (up to 500 rows, with their
metadata) and renders them, as much work as an update check, and a Range request of a
download (one per block group of electron-updater's differential download) reads its key and
build: bench/feeds.py and bench/feeds_download.py measure both. From the cache a request reads
nothing from the database.

When the cache forgets: every unit of work that commits a write to a table a feed is made of
(FEED_TABLES: a build, its channels or distribution, a channel, the application, its update
keys, the project) tells the cache as its commit completes (db/engine.py `COMMIT_WATCHERS`,
which sees every write of the ORM and of the Core helpers), before the request that wrote
answers: publish a build, change its rollout, delete it (by hand, by the retention rule or the
sweeper), rotate or revoke a key, and the next feed request reads anew. A stored answer keeps
the *mark* read before its reads began, and serves only while the mark is still the same: a
write that commits while a request is reading leaves that request's answer unused.

One process (no Redis): the mark is a counter in the process. Several (Redis, `serve --workers`
or several machines): a random value in Redis (MARK_KEY), replaced by the process that commits
the write, which publishes it in the same transaction (on CHANNEL). Each process listens for
as long as the app runs (`listen`, on a connection of its own, outside the shared pool) and
takes a new mark as its message arrives; its requests then read no mark from Redis. Before,
each feed request read the mark with a GET (a 64 KiB Range request of a download on PostgreSQL +
Redis served 0.75-0.81x a bare FileResponse's rate; docs/performance.md). The price: another
process's write is seen when its message has arrived and been read (well under a millisecond
on one machine, and as a rule before the writer's own answer has crossed back to its client
and a second request to this process: a request read in the same pass of the event loop as
the message may still be answered at the mark before it), no longer by a round trip of each
request's own.

Pub/sub delivers at most once: a message is lost only with its connection, which the listener
then sees fail; it subscribes again and reads the mark anew. A connection that stops answering
without failing (a peer gone, a middlebox that dropped it) is caught by a ping every
PING_SECONDS: the pong comes after every message published before the ping, so while pongs come
back the marks heard are complete up to when each ping left, and without one for LIVE_PINGS
intervals the listener is not trusted (and reconnects): on a connection gone silent, a write is
missed for at most that long (3 s). While it is not (Redis slow or down, a
reconnection, the listener not started: an app run without its lifespan), requests read the
mark themselves per request, as before, and with Redis unreachable the mark is unknown and
requests read the database as without the cache. A writer that could not publish its mark
publishes a new one once its listener reaches Redis again.

Each change of the listener's mark begins a new *epoch*, the mark entries are stored under: no
entry outlives a change, even when a late read brings back a value seen before. The mark is
global, not per application: a write to any application's builds re-reads every feed once,
which at the rate builds are uploaded costs nothing next to the feeds' rate of requests.

A write made outside the API's units of work (SQL by hand, a restored backup) is not seen: an
entry lives at most TTL (the feeds' own `max-age`, for which any cache between the server and
the updater may keep them anyway). An entry also ends when what it says stops being true with
time alone: a rotated key at its expiry, a Sparkle item's phased rollout interval at its next
step (feeds/sparkle.py).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar, cast

import redis.asyncio as redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from sqlalchemy.exc import MissingGreenlet

from buildbay import redis_pool
from buildbay.clock import Clock
from buildbay.db.sqlite_inline import await_in_event

log = logging.getLogger("buildbay.feeds")
T = TypeVar("T")

MARK_KEY = "buildbay:feeds-mark"
# A new mark is published on CHANNEL + the Redis database's number as it is set (channels are
# not per database: two deployments on one Redis server would otherwise hear each other).
CHANNEL = "buildbay:feeds-mark:"
PING_SECONDS = 1.0  # the listener pings its connection this often ...
LIVE_PINGS = 3  # ... and is trusted for this many intervals after the last ping answered
RETRY_SECONDS = 1.0  # between the listener's attempts while Redis fails it
TTL = timedelta(seconds=60)
MAX_ENTRIES = 10_000
# The tables the feeds and their download addresses are read from (feeds/builds.py,
# feeds/download.py, updates/published.py, updates/check.py's key); "?" is a write whose table
# was not named (counted as one of them).
FEED_TABLES = frozenset(
    {
        "builds", "build_channels", "channels", "build_groups", "applications", "update_keys",
        "projects", "?",
    }
)  # fmt: skip

Mark = Hashable


@dataclass(frozen=True, slots=True)
class Rendered:
    """A feed's bytes and their ETag (updates/routes.py `cacheable`)."""

    body: bytes
    etag: str


@dataclass(frozen=True, slots=True)
class _Entry:
    value: Any
    mark: Mark
    stored_at: datetime
    until: datetime


class FeedCache:
    def __init__(
        self,
        clock: Clock,
        shared: redis.Redis | None = None,
        ttl: timedelta = TTL,
        max_entries: int = MAX_ENTRIES,
    ) -> None:
        """`shared`: the process's Redis client (redis_pool.py) when there are several
        processes, which its owner closes."""
        self._clock = clock
        self._redis = shared
        self._ttl = ttl
        self._max_entries = max_entries
        self._entries: dict[Hashable, _Entry] = {}
        # What is being read for a key at a mark now: askers of it meanwhile wait for it.
        self._reading: dict[tuple[Hashable, Mark], asyncio.Future[Any]] = {}
        self._setbacks = redis_pool.Setbacks(log, clock)
        # A count of the changes this process knows of: its own writes, and (Redis) each new
        # mark its listener heard. Then the listener's: the shared mark it last heard of, and
        # until when (time.monotonic()) its last answered ping lets it be trusted.
        self._epoch = 0
        self._heard: bytes | None = None
        self._live_until = 0.0
        self._listener: asyncio.Task[None] | None = None
        # Announces: the last begun, and the latest whose mark Redis did not take (0: none).
        self._announces = 0
        self._unannounced = 0
        kwargs = shared.connection_pool.connection_kwargs if shared is not None else {}
        self._channel = f"{CHANNEL}{kwargs.get('db', 0)}"

    async def mark(self) -> Mark | None:
        """The mark to read and store under, read before the reads; None: do without the cache
        (Redis unreachable)."""
        if self._redis is None:
            return self._epoch
        if self.listening:
            return self._epoch  # the listener's: no round trip
        if self._setbacks.skipping():
            return None
        try:
            shared = await self._read_shared()
        except (redis.RedisError, OSError) as exc:
            self._failed("cannot read the feeds' mark; feeds are read per request", exc)
            return None
        return (self._epoch, shared)

    async def _read_shared(self, client: redis.Redis | None = None) -> bytes:
        client = client or self._redis
        assert client is not None
        shared = cast("bytes | None", await client.get(MARK_KEY))
        if shared is None:  # never set, or Redis restarted: a new mark nothing was stored at
            await client.set(MARK_KEY, secrets.token_bytes(16), nx=True)
            shared = cast("bytes | None", await client.get(MARK_KEY))
            if shared is None:  # deleted again at once (FLUSHDB): not a mark to trust
                raise redis.RedisError("the feeds' mark vanished as it was set")
        return shared

    @property
    def listening(self) -> bool:
        """Whether requests take the listener's mark (no round trip to Redis)."""
        return time.monotonic() < self._live_until

    def start(self, ping_seconds: float = PING_SECONDS) -> None:
        """Listen for other processes' marks (Redis; the app's lifespan), until `stop`."""
        if self._redis is not None and self._listener is None:
            self._listener = asyncio.create_task(
                self.listen(ping_seconds), name="feeds-mark listener"
            )

    async def stop(self) -> None:
        listener, self._listener = self._listener, None
        self._live_until = 0.0
        if listener is None:
            return
        listener.cancel()
        try:
            await listener
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():  # the stop itself is being cancelled
                raise

    async def listen(self, ping_seconds: float = PING_SECONDS) -> None:
        """Follow the mark until cancelled (the module says how). Whatever fails it, it tries
        again every RETRY_SECONDS, and requests read the mark themselves meanwhile."""
        assert self._redis is not None
        pool = self._redis.connection_pool
        while True:
            try:
                own = redis.ConnectionPool(
                    connection_class=pool.connection_class,
                    **{
                        **pool.connection_kwargs,
                        "max_connections": 2,  # its subscription; its reads and announces
                        # An error is raised as it is, not first met with a reconnection and a
                        # new subscription (redis-py's own, even with no retries) that the
                        # listener then throws away: it subscribes anew itself.
                        "retry": Retry(NoBackoff(), 0, supported_errors=()),
                    },
                )
                async with redis.Redis.from_pool(own) as client, client.pubsub() as pubsub:
                    await self._follow(client, pubsub, ping_seconds)
            except Exception as exc:  # whatever it is: the listener must outlive it
                self._setbacks.warn("the feeds' mark listener lost Redis; retrying", exc)
            finally:
                self._live_until = 0.0
            await asyncio.sleep(RETRY_SECONDS)

    async def _follow(
        self, client: redis.Redis, pubsub: redis.client.PubSub, ping_seconds: float
    ) -> None:
        await pubsub.subscribe(self._channel)
        # Subscribed (its confirmation read) before the mark is read, or a mark set between the
        # two would go unheard.
        answered = time.monotonic()
        while await pubsub.get_message(timeout=ping_seconds) is None:
            if time.monotonic() > answered + LIVE_PINGS * ping_seconds:
                raise redis.ConnectionError("the subscription was not confirmed")
        self._hear(await self._read_shared(client))
        answered = time.monotonic()
        while True:
            if self._unannounced:
                # On its own connection: the shared pool may be the very reason it failed, and
                # while this waits its subscription is not read, so its mark is not trusted.
                self._live_until = 0.0
                await self.announce(client)
            sent = time.monotonic()
            await pubsub.ping(repr(sent))
            while (left := sent + ping_seconds - time.monotonic()) > 0:
                message = await pubsub.get_message(timeout=left)
                if message is None:
                    continue
                if message["type"] == "message":
                    self._hear(message["data"])
                elif message["type"] == "pong":
                    # Every mark published before that ping left has been heard.
                    answered = max(answered, float(message["data"]))
                    self._live_until = answered + LIVE_PINGS * ping_seconds
            if time.monotonic() > answered + LIVE_PINGS * ping_seconds:
                raise redis.ConnectionError("the subscription stopped answering its pings")

    def _hear(self, shared: bytes) -> None:
        if shared != self._heard:
            self._heard = shared
            self._epoch += 1

    def get(self, key: Hashable, mark: Mark | None) -> Any:
        """What was stored under `key` at `mark`, if still good; None otherwise."""
        if mark is None:
            return None
        entry = self._entries.get(key)
        if entry is None:
            return None
        now = self._clock.now()
        if entry.mark != mark or now < entry.stored_at or now >= entry.until:  # clock set back
            del self._entries[key]
            return None
        return entry.value

    async def remembered(
        self,
        key: Hashable,
        mark: Mark | None,
        read: Callable[[], Awaitable[tuple[T, datetime | None]]],
    ) -> T:
        """What is stored under `key` at `mark`, else what `read()` gives (the value, and until
        when it holds at the latest), stored. Read once for all who ask at once: when an entry
        ends (a write, its TTL) while 50 updaters ask, one reads the database and the others
        wait for its answer instead of each reading it too (measured: the electron feed's p99
        at 50 clients on PostgreSQL, 225 ms with each reading, bench/feeds.py)."""
        found = self.get(key, mark)
        if found is not None:
            return cast("T", found)
        if mark is None:
            return (await read())[0]
        flight = (key, mark)
        if (reading := self._reading.get(flight)) is not None:
            value = await asyncio.shield(reading)  # an asker that goes away leaves it reading
            if value is not None:
                return cast("T", value)
            return (await read())[0]  # its reading failed: this asker reads, and answers, itself
        reading = asyncio.get_running_loop().create_future()
        self._reading[flight] = reading
        try:
            value, until = await read()
        except BaseException:
            reading.set_result(None)
            raise
        finally:
            del self._reading[flight]
        reading.set_result(value)
        self.put(key, value, mark, until)
        return value

    def put(
        self, key: Hashable, value: Any, mark: Mark | None, until: datetime | None = None
    ) -> None:
        """Remember `value`, read after `mark` was, until `until` at the latest."""
        if mark is None:
            return
        now = self._clock.now()
        end = now + self._ttl
        self._entries.pop(key, None)
        if len(self._entries) >= self._max_entries:
            del self._entries[next(iter(self._entries))]  # the oldest stored
        self._entries[key] = _Entry(value, mark, now, end if until is None else min(until, end))

    def committed(self, tables: frozenset[str]) -> None:
        """A unit of work committed writes to `tables` (db/engine.py `COMMIT_WATCHERS`): if a
        feed is read from one, every entry is stale, here and (Redis) in the other
        processes, before the writing request answers."""
        if tables.isdisjoint(FEED_TABLES):
            return
        self._epoch += 1
        self._entries.clear()
        if self._redis is None:
            return
        try:
            await_in_event(self.announce())
        except MissingGreenlet:  # a commit outside SQLAlchemy's async layer: no await here
            self._announces += 1
            self._unannounced = self._announces  # the listener announces it
            log.warning("a write to the feeds' tables is announced late to other processes")

    async def announce(self, client: redis.Redis | None = None) -> None:
        """Tell the other processes (Redis) that the feeds changed: a new mark, set and
        published at once (on `client`, else the shared one)."""
        client = client or self._redis
        assert client is not None
        self._announces += 1
        mine = self._announces
        new = secrets.token_bytes(16)
        self._hear(new)  # its own message, when it comes back, changes nothing here
        try:
            async with client.pipeline(transaction=True) as both:
                both.set(MARK_KEY, new)
                both.publish(self._channel, new)
                await both.execute()
            # Taken: so is every failed one begun before it (its mark is newer), not one
            # begun after it that failed meanwhile.
            if self._unannounced <= mine:
                self._unannounced = 0
        except (redis.RedisError, OSError) as exc:
            # The listener tries again when it reaches Redis.
            self._unannounced = max(self._unannounced, mine)
            # The others cannot read the mark either, and read the database meanwhile; what
            # they stored before may serve again if Redis comes back within TTL.
            self._failed("cannot tell the other processes that the feeds changed", exc)

    def _failed(self, text: str, exc: BaseException) -> None:
        self._setbacks.skip()
        self._setbacks.warn(text, exc)

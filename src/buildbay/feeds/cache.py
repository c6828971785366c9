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
the write, and read by each feed request (one GET, as auth/revocations.py's marks are), so a
write in one process is seen by the others from the moment it answers. Redis unreachable: the
mark is unknown, and requests read the database as without the cache. The mark is global, not
per application: a write to any application's builds re-reads every feed once, which at the
rate builds are uploaded costs nothing next to the feeds' rate of requests.

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
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar, cast

import redis.asyncio as redis
from sqlalchemy.exc import MissingGreenlet

from buildbay import redis_pool
from buildbay.clock import Clock
from buildbay.db.sqlite_inline import await_in_event

log = logging.getLogger("buildbay.feeds")
T = TypeVar("T")

MARK_KEY = "buildbay:feeds-mark"
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
        self._generation = 0  # this process's writes
        self._setbacks = redis_pool.Setbacks(log, clock)

    async def mark(self) -> Mark | None:
        """The mark to read and store under, read before the reads; None: do without the cache
        (Redis unreachable)."""
        if self._redis is None:
            return self._generation
        if self._setbacks.skipping():
            return None
        try:
            shared = await self._redis.get(MARK_KEY)
            if shared is None:  # never set, or Redis restarted: a new mark nothing was stored at
                await self._redis.set(MARK_KEY, secrets.token_bytes(16), nx=True)
                shared = await self._redis.get(MARK_KEY)
        except (redis.RedisError, OSError) as exc:
            self._failed("cannot read the feeds' mark; feeds are read per request", exc)
            return None
        if shared is None:
            return None
        return (self._generation, shared)

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
        self._generation += 1
        self._entries.clear()
        if self._redis is None:
            return
        try:
            await_in_event(self._announce())
        except MissingGreenlet:  # a commit outside SQLAlchemy's async layer: no await here
            log.warning("a write to the feeds' tables was not announced to other processes")

    async def _announce(self) -> None:
        assert self._redis is not None
        try:
            await self._redis.set(MARK_KEY, secrets.token_bytes(16))
        except (redis.RedisError, OSError) as exc:
            # The others cannot read the mark either, and read the database meanwhile; what
            # they stored before may serve again if Redis comes back within TTL.
            self._failed("cannot tell the other processes that the feeds changed", exc)

    def _failed(self, text: str, exc: BaseException) -> None:
        self._setbacks.skip()
        self._setbacks.warn(text, exc)

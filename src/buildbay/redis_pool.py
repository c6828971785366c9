"""The one Redis client of a process (with BUILDBAY_REDIS_URL): every request reads its user's
revocation mark (auth/revocations.py) and counts itself (ratelimit/) through it.

Its pool is bounded: a burst of requests takes turns on CONNECTIONS connections, each command
taking a fraction of a millisecond, where an unbounded pool opened a connection per concurrent
request (118 for a burst of 60 in tests/ratelimit/test_shared_counters.py), kept them all open
for good, and under load timed some of those connects out (the request then went uncounted).
A connect or a command that takes over TIMEOUT_SECONDS counts as Redis being down, and each user
of the client then does without it (fails open). The wait for a free connection is longer,
WAIT_SECONDS: a connection is held while the event loop serves other requests between the
command and its reply, which on a loaded machine can take most of a second for a burst; while
Redis hangs without refusing, a request may wait that long before it is served without Redis.

Requests wait for a connection in the order they asked (`FairConnectionPool`), as the reads
and the units of work of the database do (db/turns.py).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import redis.asyncio as redis
from redis.asyncio.connection import AbstractConnection

from buildbay.clock import Clock
from buildbay.db.turns import Line

CONNECTIONS = 10
TIMEOUT_SECONDS = 1
WAIT_SECONDS = 3
# After Redis fails them, the request counter and the revocation marks leave it alone this long
# (serving uncounted, and looking tokens up in the database): while Redis hangs, a request in
# SKIP_SECONDS waits out its timeouts, not every request. Longer than those waits, or a client
# that sends its next request when the last is answered would meet them every time.
SKIP_SECONDS = 5.0
WARN_EVERY_SECONDS = 60.0  # a Redis that stays down is logged once a minute, not per request


class Setbacks:
    """What a user of the shared client does when Redis fails it: `skip` leaves Redis alone
    for SKIP_SECONDS (`skipping` says so meanwhile), and `warn` logs at most once a minute.
    Both are measured on the app's clock (its `monotonic`), which tests move."""

    def __init__(self, log: logging.Logger, clock: Clock) -> None:
        self._log = log
        self._clock = clock
        self._skip_until: float | None = None  # clock.monotonic()
        self._last_warning: float | None = None

    def skipping(self) -> bool:
        return self._skip_until is not None and self._clock.monotonic() < self._skip_until

    def skip(self) -> None:
        self._skip_until = self._clock.monotonic() + SKIP_SECONDS

    def warn(self, text: str, exc: BaseException) -> None:
        now = self._clock.monotonic()
        if self._last_warning is None or now - self._last_warning >= WARN_EVERY_SECONDS:
            self._last_warning = now
            self._log.warning("%s: %s", text, exc)


class FairConnectionPool(redis.BlockingConnectionPool):
    """A bounded pool whose waiters get connections in the order they asked.

    redis-py's own wait lets a command that asks just as a connection comes back take it ahead
    of those already waiting, and sends the waiter it woke to the back of the line: under load
    a few commands waited many times the median (docs/architecture.md, the departures from the
    plain libraries). A line of places in front of it (db/turns.py `Line`, as the
    database's pools have) hands them out in turn, and a command that holds one always finds a
    connection in the pool. The wait for a place counts against the pool's own `timeout` and
    ends in the pool's own error."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        places = asyncio.BoundedSemaphore(self.max_connections)
        self._line = Line(places, self.timeout, _no_connection)
        self._holders: set[AbstractConnection] = set()  # handed out with a place

    async def get_connection(self, *args: Any, **kwargs: Any) -> AbstractConnection:
        await self._line.take()
        hand_out: Any = super().get_connection  # untyped in redis-py
        try:
            connection: AbstractConnection = await hand_out(*args, **kwargs)
        except BaseException:
            self._line.leave()
            raise
        self._holders.add(connection)
        return connection

    async def release(self, connection: AbstractConnection) -> None:
        # The base class also releases a connection it fails to hand out; that one never
        # had a place.
        try:
            await super().release(connection)
        finally:
            if connection in self._holders:
                self._holders.discard(connection)
                self._line.leave()


def _no_connection(_seconds: float | None) -> Exception:
    return redis.ConnectionError("No connection available.")  # redis-py's own, on its timeout


def connect(url: str) -> redis.Redis:
    """A client of its own pool (closed with the client's `aclose`); it connects on first use."""
    return redis.Redis.from_pool(
        FairConnectionPool.from_url(
            url,
            max_connections=CONNECTIONS,
            timeout=WAIT_SECONDS,  # for a free connection, in turn
            socket_timeout=TIMEOUT_SECONDS,
            socket_connect_timeout=TIMEOUT_SECONDS,
        )
    )

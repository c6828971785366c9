"""A fixed pool's connections, waited for in the order they were asked for.

SQLAlchemy's async pool waits on an `asyncio.Queue`: a task that asks just as a connection comes
back takes it ahead of those already waiting, and the waiter it woke goes to the back of the
line (sqlalchemy/sqlalchemy#7679). With every connection busy, a few requests waited many times
the median (bench/updates.py, bench/writes.py; the figures are docs/performance.md's). A
semaphore of the pool's size in front of it hands its places out in turn, and a task that holds
a place always finds a connection in the pool. The wait for a place is bounded by the pool's
own timeout (`pool_timeout`, 30 s by default) and ends in the pool's own error (a 503), as a
wait for a connection did.

Both engines of an app on PostgreSQL wait so: the read-only requests' (`Reads.on`) and the units
of work's (`UnitOfWorkSession`). SQLite's, whose pool grows past its size, does not.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.pool import QueuePool


@dataclass(frozen=True, slots=True)
class Line:
    """The places of a pool's connections, taken in the order they were asked for (the
    database's here, Redis's in redis_pool.py)."""

    places: asyncio.BoundedSemaphore  # a place given back twice is a bug: it raises
    wait_seconds: float | None  # the pool's own timeout (None: none)
    # The pool's own error, raised past `wait_seconds` as the pool's own wait would end.
    refusal: Callable[[float | None], Exception]

    async def take(self) -> None:
        """Wait for a place, before taking a connection from the pool."""
        if not self.places.locked():  # a place is free and nobody waits: no timer to set
            await self.places.acquire()
            return
        try:
            async with asyncio.timeout(self.wait_seconds):
                await self.places.acquire()
        except TimeoutError:
            raise self.refusal(self.wait_seconds) from None

    def leave(self) -> None:
        """Give the place back, once its connection is back in the pool."""
        self.places.release()


_LINES: weakref.WeakKeyDictionary[AsyncEngine, Line] = weakref.WeakKeyDictionary()


def queue_fairly(engine: AsyncEngine, connections: int) -> None:
    """Have the tasks that take `engine`'s connections through its line (`line_of`) wait for its
    `connections` (its fixed pool's size) in the order they asked."""
    pool = engine.pool
    if not isinstance(pool, QueuePool):
        raise TypeError(
            f"a fixed pool (QueuePool) is waited for in turn, not {type(pool).__name__}"
        )
    _LINES[engine] = Line(asyncio.BoundedSemaphore(connections), pool.timeout(), _pool_timeout)


def _pool_timeout(seconds: float | None) -> Exception:
    return PoolTimeoutError(f"no connection of the pool came free within {seconds:g} s")


def line_of(engine: AsyncEngine) -> Line | None:
    """`engine`'s line; None where its pool is taken as it is."""
    return _LINES.get(engine)

"""Reads: how every query that only reads is run, and the plain records it answers.

A query is a `select()` run through `Reads`, and its rows become frozen records (`RecordOf`):
values, not ORM objects. Nothing read this way joins an identity map or can be changed and
saved by mistake; a change is the unit of work's (db/engine.py), with the ORM.

`Reads` comes in two kinds, with the same methods, so that one query function serves both:
- a read-only request's (`Reads.on(engine)`): a pooled connection of its own, taken at the
  first query and given back when the request ends; on PostgreSQL in autocommit, each SELECT
  its own transaction, with no BEGIN and ROLLBACK round trips;
- a unit of work's (`Reads.within(session)`): its connection, inside its transaction, seeing
  what it has flushed.
Only SELECT statements are run: anything else is refused before it reaches the database.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, ClassVar, Generic, Protocol, TypeAlias, TypeVar

from sqlalchemy import Label, Select, inspect
from sqlalchemy.engine import Result, RowMapping
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession
from sqlalchemy.pool import QueuePool


class Dataclass(Protocol):
    """A dataclass type (what `dataclasses.fields` takes)."""

    __dataclass_fields__: ClassVar[dict[str, Any]]


R = TypeVar("R", bound=Dataclass)
Query: TypeAlias = Select[*tuple[Any, ...]]


@dataclass(frozen=True, slots=True)
class _Turns:
    places: asyncio.Semaphore
    wait_seconds: float  # the pool's own timeout: past it, a request is refused as before


# The engines whose read-only requests wait for a connection in turn (`queue_fairly`).
_TURNS: weakref.WeakKeyDictionary[AsyncEngine, _Turns] = weakref.WeakKeyDictionary()


def queue_fairly(engine: AsyncEngine, connections: int) -> None:
    """Have read-only requests wait for `engine`'s `connections` (its fixed pool's size) in the
    order they asked.

    The pool's own wait lets a request that asks just as a connection comes back take it
    ahead of those already waiting, and sends the waiter it woke to the back of the line:
    with every connection busy, a few requests waited many times the median
    (docs/performance.md). An asyncio.Semaphore hands its places out in turn, and a request
    that holds one always finds a connection in the pool, so the wait for a place is bounded
    by the pool's own timeout (`pool_timeout`, 30 s by default) and ends in the pool's own
    error (a 503), as a wait for a connection did."""
    pool = engine.pool
    if not isinstance(pool, QueuePool):
        raise TypeError(
            f"a fixed pool (QueuePool) is waited for in turn, not {type(pool).__name__}"
        )
    _TURNS[engine] = _Turns(asyncio.Semaphore(connections), pool.timeout())


class Reads:
    __slots__ = ("_connect", "_connection", "_owned", "_turn")

    def __init__(
        self,
        connect: Callable[[], Awaitable[AsyncConnection]],
        *,
        owned: bool,
        turn: asyncio.Semaphore | None = None,
    ) -> None:
        self._connect = connect
        self._connection: AsyncConnection | None = None
        self._owned = owned  # closed by `close` (a read-only request's own connection)
        self._turn = turn  # taken before the connection, given back after it (queue_fairly)

    @classmethod
    def on(cls, engine: AsyncEngine) -> Reads:
        """Reads on a connection of their own from `engine`'s pool, taken at the first query."""
        turns = _TURNS.get(engine)

        async def connect() -> AsyncConnection:
            if turns is None:
                return await engine.connect().start()
            try:
                async with asyncio.timeout(turns.wait_seconds):
                    await turns.places.acquire()
            except TimeoutError:
                raise PoolTimeoutError(
                    f"no connection of the pool came free within {turns.wait_seconds:g} s"
                ) from None
            try:
                return await engine.connect().start()
            except BaseException:
                turns.places.release()
                raise

        return cls(connect, owned=True, turn=turns.places if turns else None)

    @classmethod
    def within(cls, session: AsyncSession) -> Reads:
        """Reads inside `session`'s transaction (a unit of work's)."""
        return cls(session.connection, owned=False)

    async def all(
        self, statement: Query, params: Mapping[str, Any] | None = None
    ) -> Sequence[RowMapping]:
        return (await self._execute(statement, params)).mappings().all()

    async def first(
        self, statement: Query, params: Mapping[str, Any] | None = None
    ) -> RowMapping | None:
        return (await self._execute(statement, params)).mappings().first()

    async def scalar(self, statement: Query, params: Mapping[str, Any] | None = None) -> Any:
        return (await self._execute(statement, params)).scalar()

    async def _execute(
        self, statement: Query, params: Mapping[str, Any] | None
    ) -> Result[*tuple[Any, ...]]:
        if not isinstance(statement, Select):
            raise TypeError(f"Reads only run SELECT statements, not {type(statement).__name__}")
        connection = self._connection
        if connection is None:
            connection = self._connection = await self._connect()
        return await connection.execute(statement, params)

    async def close(self) -> None:
        """Give a read-only request's connection back to the pool (a unit of work's stays)."""
        connection, self._connection = self._connection, None
        if connection is not None and self._owned:
            try:
                await connection.close()
            finally:
                if self._turn is not None:
                    self._turn.release()


class RecordOf(Generic[R]):
    """The columns of a model that a record type holds, selected under the record's field
    names (after `prefix`, for a query that reads several tables), and the record of a row.

    The record's fields are named after the model's attributes, so a record reads like the
    model it comes from (`build.file_name`), in templates as in code.
    """

    __slots__ = ("_keys", "_names", "_record", "columns")

    def __init__(self, record: type[R], model: type[Any], prefix: str = "") -> None:
        mapper = inspect(model)
        self._record = record
        self._names = tuple(field.name for field in fields(record))
        self._keys = tuple(prefix + name for name in self._names)
        self.columns: tuple[Label[Any], ...] = tuple(
            mapper.columns[name].label(key)
            for name, key in zip(self._names, self._keys, strict=True)
        )

    def of(self, row: RowMapping) -> R:
        return self._record(*[row[key] for key in self._keys])

    def of_entity(self, entity: Any) -> R:
        """The record of an ORM object a unit of work holds (what it just wrote)."""
        return self._record(*[getattr(entity, name) for name in self._names])

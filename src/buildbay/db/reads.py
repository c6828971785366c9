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

from collections.abc import Mapping, Sequence
from dataclasses import fields
from typing import Any, ClassVar, Generic, Protocol, TypeAlias, TypeVar

from sqlalchemy import Label, Select, inspect
from sqlalchemy.engine import Result, RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession

from buildbay.db.turns import Line, line_of


class Dataclass(Protocol):
    """A dataclass type (what `dataclasses.fields` takes)."""

    __dataclass_fields__: ClassVar[dict[str, Any]]


R = TypeVar("R", bound=Dataclass)
Query: TypeAlias = Select[*tuple[Any, ...]]


class Reads:
    __slots__ = ("_connection", "_engine", "_line", "_session")

    def __init__(
        self, *, engine: AsyncEngine | None = None, session: AsyncSession | None = None
    ) -> None:
        if (engine is None) == (session is None):
            raise TypeError("Reads are on an engine or within a session")
        self._engine = engine  # a read-only request's: a connection of its own, closed by `close`
        self._session = session  # a unit of work's: its connection, in its transaction
        self._connection: AsyncConnection | None = None
        # The engine's line (db/turns.py) while a place in it is held, left with the connection.
        self._line: Line | None = None

    @classmethod
    def on(cls, engine: AsyncEngine) -> Reads:
        """Reads on a connection of their own from `engine`'s pool, taken at the first query
        (in turn, where the engine's connections are waited for so)."""
        return cls(engine=engine)

    @classmethod
    def within(cls, session: AsyncSession) -> Reads:
        """Reads inside `session`'s transaction (a unit of work's)."""
        return cls(session=session)

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
        # A unit of work's connection is its transaction's: a new one after the session gave
        # it back (db/engine.py `connection_released`).
        if connection is None or connection.closed:
            connection = self._connection = await self._connect()
        return await connection.execute(statement, params)

    async def _connect(self) -> AsyncConnection:
        if self._session is not None:
            return await self._session.connection()
        assert self._engine is not None
        line = line_of(self._engine)
        if line is not None:
            await line.take()
        try:
            connection = await self._engine.connect().start()
        except BaseException:
            if line is not None:
                line.leave()
            raise
        self._line = line
        return connection

    async def close(self) -> None:
        """Give a read-only request's connection back to the pool (a unit of work's stays)."""
        connection, self._connection = self._connection, None
        if connection is not None and self._session is None:
            line, self._line = self._line, None
            try:
                await connection.close()
            finally:
                if line is not None:
                    line.leave()


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

"""Engine and session factory. The request's session commits on success and rolls back on error."""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar
from urllib.parse import quote
from weakref import WeakKeyDictionary

from sqlalchemy import Engine, Select, bindparam, event, inspect, make_url, text
from sqlalchemy.engine import Dialect, ExceptionContext
from sqlalchemy.exc import DBAPIError, DisconnectionError
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)
from sqlalchemy.orm import ORMExecuteState, Session
from sqlalchemy.pool import ConnectionPoolEntry
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.util import greenlet_spawn

import buildbay.db.sqlite_inline  # noqa: F401  (registers the sqlite+inline dialect)

log = logging.getLogger("buildbay.db")
T = TypeVar("T")

PING_AFTER_IDLE_SECONDS = 1.0
POOL_SIZE = 20


def create_engine(
    url: str,
    *,
    pool_size: int = POOL_SIZE,
    ping_after_idle: float = PING_AFTER_IDLE_SECONDS,
    **kwargs: Any,
) -> AsyncEngine:
    if url.startswith("sqlite"):
        # The inline driver waits for locks itself, without blocking the loop (busy timeout 0);
        # aiosqlite waits in its worker thread.
        inline = make_url(url).get_driver_name() == "inline"
        if not inline:
            kwargs.setdefault("connect_args", {"timeout": 30})
        engine = create_async_engine(url, **kwargs)

        database = engine.url.database or ""
        files = [database + suffix for suffix in ("", "-wal", "-shm")]

        @event.listens_for(engine.sync_engine, "connect")
        def _sqlite_pragmas(dbapi_connection: Any, record: ConnectionPoolEntry) -> None:
            # WAL lets readers run beside the one writer; foreign keys make ON DELETE CASCADE work.
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            if not inline:
                cursor.execute("PRAGMA busy_timeout=30000")
            cursor.close()
            if database not in ("", ":memory:") and not _writable(files):
                record.info[_OPENED_READ_ONLY] = False  # not used yet

        @event.listens_for(engine.sync_engine, "checkout")
        def _read_only_serves_once(_dbapi: Any, record: ConnectionPoolEntry, _proxy: Any) -> None:
            # SQLite opens a file it cannot write (read-only file system, permissions) read-only,
            # and the connection stays so for good: it serves the request that opened it, and is
            # then replaced, so that writes work again as soon as the file is writable.
            if _OPENED_READ_ONLY in record.info:
                if record.info[_OPENED_READ_ONLY]:
                    raise DisconnectionError("opened while the database file was read-only")
                record.info[_OPENED_READ_ONLY] = True

        @event.listens_for(engine.sync_engine, "handle_error")
        def _drop_a_read_only_connection(context: ExceptionContext) -> None:
            # And one that was opened read-only all the same (the file became writable between
            # SQLite's open and the check above) goes at its first refused write.
            if _read_only_error(context.original_exception):
                context.is_disconnect = True

        return engine
    # A fixed pool: no overflow. SQLAlchemy closes an overflow connection as soon as it is given
    # back to a full pool, so bursts past the pool's size opened and closed a PostgreSQL
    # connection (a server process) per request: one process answered 898 list requests a
    # second with 10 + 10 overflow, 1,371 with 20 (bench/scale.py). A request that finds all
    # connections busy waits for one (they are held for a query at a time).
    engine = create_async_engine(url, pool_size=pool_size, max_overflow=0, **kwargs)
    _ping_when_idle(engine, ping_after_idle)
    return engine


_OPENED_READ_ONLY = "buildbay.opened_read_only"
_IDLE_SINCE = "buildbay.idle_since"


def _ping_when_idle(engine: AsyncEngine, after: float) -> None:
    """Ping a pooled connection before use only if it has been idle for `after` seconds.

    SQLAlchemy's `pool_pre_ping` pings at every check-out: one more round trip per request,
    which on a busy server cost as much as a fifth of its throughput (bench/load.py). A
    connection given back a moment ago is as good as the one the server just used; one that
    sat idle may have been closed meanwhile (a database restart, an idle timeout), and is
    replaced before a request sees it. A restart within `after` seconds of a connection's last
    use costs one request a 503 (the error invalidates the whole pool), as it costs the
    requests that were running at that moment.
    """
    dialect = engine.sync_engine.dialect

    @event.listens_for(engine.sync_engine, "checkin")
    def _note_idle(_dbapi: Any, record: ConnectionPoolEntry) -> None:
        # `info` belongs to the DB-API connection: a replaced one starts without this key.
        record.info[_IDLE_SINCE] = time.monotonic()

    @event.listens_for(engine.sync_engine, "checkout")
    def _ping_if_idle(dbapi_connection: Any, record: ConnectionPoolEntry, _proxy: Any) -> None:
        idle_since = record.info.get(_IDLE_SINCE)
        if idle_since is None or time.monotonic() - idle_since < after:
            return  # just opened, or just used
        try:
            dialect.do_ping(dbapi_connection)
        except Exception as exc:
            # The pool replaces the connection and tries again.
            raise DisconnectionError("the idle connection is gone") from exc


def _read_only_error(exc: BaseException) -> bool:
    """`attempt to write a readonly database` (SQLITE_READONLY and its extended codes)."""
    code = getattr(exc, "sqlite_errorcode", None)
    return (
        isinstance(exc, sqlite3.Error)
        and code is not None
        and code & 0xFF == sqlite3.SQLITE_READONLY
    )


def _writable(paths: Sequence[str]) -> bool:
    """Whether these files (those that exist) can be opened for writing, as SQLite tries to."""
    for path in paths:
        try:
            os.close(os.open(path, os.O_RDWR))
        except FileNotFoundError:
            continue
        except OSError:
            return False
    return True


async def check_database(engine: AsyncEngine) -> None:
    """Raise unless the database answers and, for SQLite, could take a write now.

    A SELECT alone passes on a SQLite file that has become read-only, so a new connection
    also takes the write lock and changes a page, then rolls back: nothing is written.
    """
    async with engine.connect() as connection:
        await connection.execute(text("SELECT 1"))
    if engine.dialect.name == "sqlite" and engine.url.database not in (None, "", ":memory:"):
        await asyncio.to_thread(_sqlite_write_probe, str(engine.url.database))


def _sqlite_write_probe(path: str) -> None:
    url = f"file:{quote(path)}?mode=rw"  # never creates the file
    connection = sqlite3.connect(url, uri=True, timeout=0, isolation_level=None)
    try:
        try:
            connection.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode & 0xFF == sqlite3.SQLITE_BUSY:
                return  # another connection is writing: the file takes writes
            raise
        version = connection.execute("PRAGMA user_version").fetchone()[0]
        connection.execute(f"PRAGMA user_version = {int(version)}")
        connection.execute("ROLLBACK")
    finally:
        connection.close()


class TrackedSession(Session):
    """A session that notes whether it wrote, so that a request which only read ends without a
    commit (see `finish`): a commit costs a read-only request more than its query."""


WROTE = "buildbay.wrote"


@event.listens_for(TrackedSession, "do_orm_execute")
def _note_statement(state: ORMExecuteState) -> None:
    # Anything but a SELECT counts as a write, text() included: a wrong guess costs a commit.
    if not state.is_select:
        state.session.info[WROTE] = True


@event.listens_for(TrackedSession, "before_flush")
def _note_flush(session: Session, _context: Any, _instances: Any) -> None:
    session.info[WROTE] = True


_PENDING = "buildbay.after_commit.pending"
_COMMITTED = "buildbay.after_commit.committed"


def after_commit(session: AsyncSession, action: Callable[[], Awaitable[None]]) -> None:
    """Have `finish` await `action` at the end of the unit of work, before the response goes
    out, if the session's current transaction commits (whoever commits it); never if it rolls
    back. For telling the world outside the database what the transaction did."""
    session.info.setdefault(_PENDING, []).append(action)


@event.listens_for(TrackedSession, "after_commit")
def _move_to_committed(session: Session) -> None:
    if pending := session.info.pop(_PENDING, None):
        session.info.setdefault(_COMMITTED, []).extend(pending)


@event.listens_for(TrackedSession, "after_rollback")
def _drop_pending(session: Session) -> None:
    session.info.pop(_PENDING, None)


async def _run_after_commit(session: AsyncSession) -> None:
    for action in session.info.pop(_COMMITTED, ()):
        try:
            await action()
        except Exception:  # the commit stands; the request goes on
            log.exception("an action after a commit failed")


def create_sessionmaker(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    return async_sessionmaker(
        engine, expire_on_commit=False, autoflush=False, sync_session_class=TrackedSession
    )


def has_writes(session: AsyncSession) -> bool:
    """Whether committing `session` would change anything (statements run or changes pending)."""
    return bool(session.info.get(WROTE) or session.new or session.dirty or session.deleted)


async def finish(session: AsyncSession, *, ok: bool) -> None:
    """End a unit of work: commit it if `ok` and it wrote, roll it back otherwise; then close.

    Raises what the commit raises (after rolling back), so a caller never reports success for a
    write that did not land. Either way, the `after_commit` actions of whatever did commit run
    last.
    """
    try:
        await _finish(session, ok=ok)
    finally:
        if _COMMITTED in session.info:
            await _run_after_commit(session)


async def _finish(session: AsyncSession, *, ok: bool) -> None:
    wrote = has_writes(session)
    if not wrote and not session.in_transaction():
        return  # never used: no connection to give back, nothing to write
    if not ok:
        await _discard(session)
        return
    if wrote:
        try:
            await session.commit()
        except BaseException:
            await _discard(session)
            raise
    # After a commit, or with nothing written: the connection goes back to the pool (a read-only
    # transaction is rolled back there); bookkeeping with no I/O to protect, so no extra task.
    await session.close()


async def _discard(session: AsyncSession) -> None:
    # `async with` closes the session in a task of its own, which completes even if this one is
    # cancelled meanwhile: the connection goes back to the pool whatever happens.
    async with session:
        await session.rollback()


class FastSelect:
    """A Core SELECT for hot read paths: compiled once per dialect, run on a pooled DB-API
    connection without SQLAlchemy's per-execution machinery.

    On the list endpoint clients poll, `Connection.execute` (statement cache lookup, execution
    context, result metadata, Row objects) took ~70 us of a ~300 us request for a query SQLite
    answers in ~20 us (bench/api.py). What that machinery does for such a statement is kept:
    the bound values in the compiled order, the column types' processing of bound values and of
    results (UTC datetimes), the pool's check-out (with its ping of an idle connection) and
    check-in, and DB-API errors raised as SQLAlchemy's, the connection invalidated on a
    disconnect. Only plain statements qualify: no expanding (IN) or literal-rendered parameters.

    On PostgreSQL the statement runs in autocommit, its own transaction: a read of one statement
    sees the same either way, and the driver's BEGIN and the pool's ROLLBACK would be two more
    round trips (a read went from ~200 to ~115 us).
    """

    __slots__ = ("_plans", "columns", "statement")

    def __init__(self, statement: Select[Any]) -> None:
        self.statement = statement
        self.columns: tuple[str, ...] = tuple(statement.selected_columns.keys())
        # Per dialect instance (each engine has one), forgotten with its engine.
        self._plans: WeakKeyDictionary[Dialect, _Plan] = WeakKeyDictionary()

    def plan(self, dialect: Dialect) -> _Plan:
        plan = self._plans.get(dialect)
        if plan is None:
            plan = self._plans[dialect] = _Plan.of(self.statement, dialect)
        return plan


@dataclass(frozen=True, slots=True)
class _Plan:
    sql: str
    compiled: SQLCompiler
    positions: tuple[str, ...] | None  # None: the driver takes named parameters
    processors: tuple[Callable[[Any], Any] | None, ...]
    converters: tuple[tuple[str, Callable[[Any], Any]], ...]  # of bound values, by name
    # PostgreSQL's driver would wrap the one statement in BEGIN ... ROLLBACK, two more round
    # trips; in autocommit the statement is its own transaction, which reads the same.
    autocommit: bool

    @classmethod
    def of(cls, statement: Select[Any], dialect: Dialect) -> _Plan:
        compiled = statement.compile(dialect=dialect)
        assert isinstance(compiled, SQLCompiler)
        if compiled.post_compile_params or compiled.literal_execute_params:
            raise ValueError("FastSelect takes no expanding or literal-rendered parameters")
        converters = {
            compiled.bind_names[bind]: process  # the name construct_params gives its value
            for bind in compiled.binds.values()
            if (process := bind.type.dialect_impl(dialect).bind_processor(dialect)) is not None
        }
        processors = tuple(
            column.type.dialect_impl(dialect).result_processor(dialect, None)
            for column in statement.selected_columns
        )
        positions = tuple(compiled.positiontup or ()) if compiled.positional else None
        autocommit = dialect.name == "postgresql"
        return cls(
            compiled.string, compiled, positions, processors, tuple(converters.items()), autocommit
        )

    def parameters(self, params: Mapping[str, Any]) -> Any:
        values = self.compiled.construct_params(params)
        for name, process in self.converters:
            if values[name] is not None:
                values[name] = process(values[name])
        if self.positions is None:
            return values
        return tuple(values[name] for name in self.positions)

    def rows(
        self, fetched: Sequence[Sequence[Any]], columns: tuple[str, ...]
    ) -> list[dict[str, Any]]:
        converted = [(i, process) for i, process in enumerate(self.processors) if process]
        rows = []
        for raw in fetched:
            values = list(raw)
            for i, process in converted:
                values[i] = process(values[i])
            rows.append(dict(zip(columns, values, strict=True)))
        return rows


def pages(statement: Select[Any], key: Any) -> tuple[FastSelect, FastSelect]:
    """A newest-first list (`statement`, ordered by `key` descending, with a `:limit`) as two
    FastSelects: its first page, and the page after `:after_id`."""
    return FastSelect(statement), FastSelect(statement.where(key < bindparam("after_id")))


class EntityColumns(Generic[T]):
    """A model's table columns for a FastSelect, labeled `prefix` + attribute name (so that two
    entities in one row stay apart), and the model's instances made from such rows.

    The instances are transient: no session knows them, so changing one changes nothing. They
    serve read-only requests, which show them and pass their ids on.
    """

    __slots__ = ("_by_label", "_id_label", "columns", "model")

    def __init__(self, model: type[T], prefix: str) -> None:
        mapper = inspect(model)
        # Attribute names, which are not always the columns' (Build.metadata_ is "metadata").
        named = [(mapper.get_property_by_column(column).key, column) for column in mapper.columns]
        self.model = model
        self.columns = [column.label(prefix + key) for key, column in named]
        self._by_label = [(prefix + key, key) for key, _ in named]
        self._id_label = prefix + "id"

    def of(self, row: Mapping[str, Any]) -> T:
        """The entity in `row`."""
        return self.model(**{key: row[label] for label, key in self._by_label})

    def of_outer(self, row: Mapping[str, Any]) -> T | None:
        """The entity in `row`; None if an outer join found none."""
        return None if row[self._id_label] is None else self.of(row)


async def read_rows(
    session: AsyncSession, query: FastSelect, params: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """The rows of `query`, as `session` sees them, each a dict keyed by `query.columns`.

    A session already in a transaction reads on its connection (and sees its own writes).
    Otherwise the rows come from a pooled connection of the engine, taken, used and given back
    in one trip into SQLAlchemy's synchronous layer (see FastSelect). The session is left
    unused, so a request never holds two connections (which a busy pool could deadlock on).
    """
    if session.in_transaction():
        result = await session.execute(query.statement, params)
        return [dict(zip(query.columns, row, strict=True)) for row in result]
    assert session.bind is not None
    return await greenlet_spawn(_read_rows, session.bind.sync_engine, query, params)


def _read_rows(
    engine: Engine, query: FastSelect, params: Mapping[str, Any]
) -> list[dict[str, Any]]:
    dialect = engine.dialect
    plan = query.plan(dialect)
    parameters = plan.parameters(params)
    try:
        connection = engine.raw_connection()
    except dialect.loaded_dbapi.Error as exc:
        raise _wrapped(exc, plan, parameters, dialect, invalidated=False) from exc
    dbapi_connection = connection.dbapi_connection
    assert dbapi_connection is not None  # checked out just now
    try:
        if plan.autocommit:
            dbapi_connection.autocommit = True
        cursor = connection.cursor()
        try:
            cursor.execute(plan.sql, parameters)
            fetched = cursor.fetchall()
        finally:
            cursor.close()
            if plan.autocommit:
                dbapi_connection.autocommit = False
    except dialect.loaded_dbapi.Error as exc:
        disconnected = dialect.is_disconnect(exc, connection.dbapi_connection, None)
        if disconnected:
            connection.invalidate(exc)
        connection.close()
        raise _wrapped(exc, plan, parameters, dialect, invalidated=disconnected) from exc
    except BaseException:
        connection.close()
        raise
    connection.close()
    return plan.rows(fetched, query.columns)


def _wrapped(
    exc: Exception, plan: _Plan, parameters: Any, dialect: Dialect, *, invalidated: bool
) -> BaseException:
    return DBAPIError.instance(
        plan.sql,
        parameters,
        exc,
        dialect.loaded_dbapi.Error,
        hide_parameters=True,
        connection_invalidated=invalidated,
        dialect=dialect,
    )

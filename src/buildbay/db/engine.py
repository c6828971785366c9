"""Engines and units of work. A unit of work (a request that writes) commits on success and
rolls back on error; requests that only read use db/reads.py, on the read engine that
`create_engines` builds beside the units of work's."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import sqlite3
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any, TypeVar, cast
from urllib.parse import quote

from sqlalchemy import (
    BindParameter,
    Connection,
    Insert,
    Table,
    bindparam,
    event,
    insert,
    make_url,
    text,
)
from sqlalchemy.engine import ExceptionContext
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)
from sqlalchemy.orm import ORMExecuteState, Session
from sqlalchemy.pool import ConnectionPoolEntry

import buildbay.db.sqlite_inline  # noqa: F401  (registers the sqlite+inline dialect)
from buildbay.db.turns import Line, line_of, queue_fairly

log = logging.getLogger("buildbay.db")
T = TypeVar("T")

PING_AFTER_IDLE_SECONDS = 1.0
POOL_SIZE = 10  # each pool's (settings.database_pool_size)


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
    # connection (a server process) per request, which cost a busy process much of its
    # throughput (docs/performance.md, bench/scale.py). A request that finds all
    # connections busy waits for one (they are held for a query at a time).
    engine = create_async_engine(url, pool_size=pool_size, max_overflow=0, **kwargs)
    _ping_when_idle(engine, ping_after_idle)
    return engine


_OPENED_READ_ONLY = "buildbay.opened_read_only"
_IDLE_SINCE = "buildbay.idle_since"


def _ping_when_idle(engine: AsyncEngine, after: float) -> None:
    """Ping a pooled connection before use only if it has been idle for `after` seconds.

    SQLAlchemy's `pool_pre_ping` pings at every check-out: one more round trip per request,
    which on a busy server cost a good part of its throughput (docs/performance.md). A
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
    """Whether these files (those that exist) can be written, as SQLite would try to.

    Asked with access(2), never by opening them: SQLite's locks are POSIX locks, and closing
    any descriptor of a file drops every lock this process holds on it, SQLite's included.
    Another process's connection then takes itself for the last one and deletes the WAL this
    process is still committing into (tests/faults/test_sqlite_beside_operators.py).
    """
    return all(os.access(path, os.W_OK) for path in paths if Path(path).exists())


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


class UnitOfWork(Session):
    """The session of a request that changes something: committed by the request's unit of work
    (`finish`), never by a service. Carries the `after_commit` actions."""


_Method = TypeVar("_Method", bound=Callable[..., Awaitable[Any]])


def _in_turn(method: _Method) -> _Method:
    """`method` of an AsyncSession, run once the session has its place in line."""

    @functools.wraps(method)
    async def in_turn(self: UnitOfWorkSession, *args: Any, **kwargs: Any) -> Any:
        if self._line is not None and self._place is None:
            await self._take_place(self._line)
        return await method(self, *args, **kwargs)

    return cast("_Method", in_turn)


class UnitOfWorkSession(AsyncSession):
    """A unit of work, as the services hold it. Where its engine's connections are waited for
    in turn (db/turns.py: PostgreSQL), it takes a place in line before its first statement,
    where the session takes a connection, and gives it back once the session is closed
    (`finish` closes it, as does `async with`): with every connection busy, units of work get
    them in the order they asked, where SQLAlchemy's pool served a late asker first.

    Each method that may run a statement takes the place first. `begin()` and `begin_nested()`
    cannot (they are not awaited); here a statement always comes first. A session that got its
    connection so, without a place, goes on without one rather than wait for a place while it
    holds a connection: it is served as the pool serves, and none waits on it. A session dropped
    without being closed gives its place back when it is collected, as the pool does with its
    connection."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._line = line_of(self.bind) if isinstance(self.bind, AsyncEngine) else None
        # The place held in `_line`: a finalizer that gives it back should the session be
        # collected unclosed (`leave_line` gives it back at once, and only once).
        self._place: weakref.finalize[Any, UnitOfWorkSession] | None = None

    async def _take_place(self, line: Line) -> None:
        transaction = self.sync_session.get_transaction()
        if transaction is not None and transaction.connections:
            return  # a connection taken without a place (see the class's docstring)
        await line.take()
        if self._place is not None:  # another task of this session took one meanwhile
            line.leave()
            return
        loop = asyncio.get_running_loop()
        self._place = weakref.finalize(self, loop.call_soon_threadsafe, line.leave)
        self._place.atexit = False  # at exit the loop is gone, and so is the line

    def leave_line(self) -> None:
        """Give the place back, once the session's connection is back in the pool."""
        place, self._place = self._place, None
        if place is not None and place.detach() is not None and self._line is not None:
            self._line.leave()

    async def close(self) -> None:
        try:
            await super().close()
        finally:
            self.leave_line()

    execute = _in_turn(AsyncSession.execute)
    # (mypy cannot bind this one's overloads to the TypeVar; callers see AsyncSession's types.)
    scalar = _in_turn(cast("Any", AsyncSession.scalar))
    scalars = _in_turn(AsyncSession.scalars)
    stream = _in_turn(AsyncSession.stream)
    stream_scalars = _in_turn(AsyncSession.stream_scalars)
    get = _in_turn(AsyncSession.get)
    get_one = _in_turn(AsyncSession.get_one)
    refresh = _in_turn(AsyncSession.refresh)
    merge = _in_turn(AsyncSession.merge)
    merge_all = _in_turn(AsyncSession.merge_all)
    delete = _in_turn(AsyncSession.delete)
    delete_all = _in_turn(AsyncSession.delete_all)
    flush = _in_turn(AsyncSession.flush)
    commit = _in_turn(AsyncSession.commit)  # flushes what was added
    connection = _in_turn(AsyncSession.connection)
    run_sync = _in_turn(AsyncSession.run_sync)


_HELD = "buildbay.held"
_WROTE = "buildbay.wrote"  # the current transaction has written (`connection_released`)
_TABLES = "buildbay.tables_written"  # the tables the current transaction wrote to
# A unit of work's info key (its sessionmaker's `info`): callables each told, synchronously as
# the commit completes (in its greenlet: `await_only` may wait on something), the names of the
# tables a committed transaction wrote to (feeds/cache.py: the cached feeds go stale).
COMMIT_WATCHERS = "buildbay.commit_watchers"
# The execution option of an UPDATE that sets a column to itself to lock a row (SQLite has no
# SELECT ... FOR UPDATE: db/concurrency.py `lock_row`): no table changes.
LOCK_ONLY = "buildbay_lock_only"
_PENDING = "buildbay.after_commit.pending"
_COMMITTED = "buildbay.after_commit.committed"
_UNDO = "buildbay.unless_committed"


async def hold_until_ended(session: AsyncSession, resource: AbstractAsyncContextManager[T]) -> T:
    """Enter `resource` (a lock, a guard) and leave it only once `finish` has committed or
    rolled back `session`: what it protects stays protected until the change is durable."""
    held = session.info.get(_HELD)
    if held is None:
        held = session.info[_HELD] = contextlib.AsyncExitStack()
    return await held.enter_async_context(resource)


@contextlib.asynccontextmanager
async def connection_released(session: AsyncSession) -> AsyncIterator[None]:
    """Give `session`'s connection back to the pool (and its place in line) for the time of a
    long wait outside the database, such as reading a build file: the first statement after
    it takes a connection again, in a new transaction. A unit of work waiting so holds none of
    the few connections the other requests need.

    Only before the unit of work has written anything, as the transaction it had ends here:
    what it had written would be lost, so a session that wrote (or has `after_commit` actions
    waiting) raises RuntimeError. What it read may have changed when it reads again, and locks
    it took are let go: write conditionally after it. What `hold_until_ended` took stays held.
    """
    if session.info.get(_WROTE) or session.info.get(_PENDING) or _unflushed(session):
        raise RuntimeError("a unit of work that wrote cannot give its connection back")
    if session.in_transaction():
        await session.rollback()  # it wrote nothing: this ends the transaction, nothing more
    if isinstance(session, UnitOfWorkSession):
        session.leave_line()
    yield


def _unflushed(session: AsyncSession) -> bool:
    return bool(session.new or session.dirty or session.deleted)


def after_commit(session: AsyncSession, action: Callable[[], Awaitable[None]]) -> None:
    """Have `finish` await `action` at the end of the unit of work, before the response goes
    out, if the session's current transaction commits (whoever commits it); never if it rolls
    back. For telling the world outside the database what the transaction did."""
    session.info.setdefault(_PENDING, []).append(action)


def unless_committed(session: AsyncSession, action: Callable[[], Awaitable[None]]) -> None:
    """Have `finish` await `action` at the end of the unit of work unless its transaction
    commits: rolled back, or its commit failed. For undoing what was done outside the database
    for the transaction's sake before it committed (objects written to storage for the rows it
    adds); a crash in between leaves what `action` would have undone, for a sweeper."""
    session.info.setdefault(_UNDO, []).append(action)


async def insert_rows(
    session: AsyncSession, table: Table, rows: Sequence[Mapping[str, Any]]
) -> None:
    """Write `rows` (dicts of `table`'s columns, the same in each) in the session's
    transaction: a webhook event's deliveries, a distribution's jobs and install links.

    One statement per table, compiled once and cached, executed with all the rows: SQLAlchemy's
    "insertmanyvalues" sends them as multi-row INSERTs, as many rows each as the database takes
    (the driver alone would send an INSERT per row). An INSERT built with `.values([...])`
    would be compiled anew on every call, which cost a request that emits an event more than
    the rest of the event's work together (docs/performance.md). Core, on the session's
    connection: the rows need none of the unit of work's bookkeeping."""
    if rows:
        connection = await session.connection()
        _note_table(session, table.name)
        await connection.execute(_insert_returning_keys(table), list(rows))


@functools.cache
def _insert_returning_keys(table: Table) -> Insert:
    # RETURNING is what lets SQLAlchemy batch an executemany into multi-row INSERTs.
    return insert(table).returning(*table.primary_key.columns)


Row = tuple[Table, Mapping[str, Any]]  # a table, and a row of it naming all its columns


async def insert_pair(session: AsyncSession, first: Row, second: Row) -> None:
    """Write one row to each of two tables in the session's transaction, as cheaply as the
    database allows: a webhook event's delivery and its outbox job, in the request of the
    change the event tells of (bench/webhooks.py, docs/performance.md).

    On PostgreSQL one statement writes both (a WITH holding the first INSERT): one round trip
    where two INSERTs cost two. SQLite has no such statement; its two INSERTs run in one pass
    through SQLAlchemy's async layer (`run_sync`), not one each."""
    connection = await session.connection()
    session.info[_WROTE] = True  # written on the connection: no event of the session sees it
    _note_table(session, first[0].name)
    _note_table(session, second[0].name)
    if connection.dialect.name == "postgresql":
        params = {f"{_FIRST}{k}": v for k, v in first[1].items()}
        params |= {f"{_SECOND}{k}": v for k, v in second[1].items()}
        await connection.execute(_insert_both(first[0], second[0]), params)
        return

    def both(sync_connection: Connection) -> None:
        for table, row in (first, second):
            sync_connection.execute(_insert(table), row)

    await connection.run_sync(both)


_FIRST, _SECOND = "first_", "second_"  # the two rows' parameters, by the names of their columns


@functools.cache
def _insert(table: Table) -> Insert:
    return insert(table)


@functools.cache
def _insert_both(first: Table, second: Table) -> Insert:
    def values(table: Table, prefix: str) -> dict[str, BindParameter[Any]]:
        return {c.name: bindparam(prefix + c.name, type_=c.type) for c in table.columns}

    written = insert(first).values(values(first, _FIRST)).cte(f"{first.name}_written")
    return insert(second).values(values(second, _SECOND)).add_cte(written)


def _note_table(session: Session | AsyncSession, name: str) -> None:
    session.info.setdefault(_TABLES, set()).add(name)


@event.listens_for(UnitOfWork, "do_orm_execute")
def _note_a_write(state: ORMExecuteState) -> None:
    if not state.is_select:
        state.session.info[_WROTE] = True
        if state.execution_options.get(LOCK_ONLY):
            return  # writes nothing: a watcher of committed writes need not hear of it
        # An UPDATE, DELETE or INSERT names its table (an ORM entity's: the mapped table).
        table = getattr(state.statement, "table", None)
        _note_table(state.session, getattr(table, "name", None) or "?")


@event.listens_for(UnitOfWork, "after_flush")
def _note_a_flush(session: Session, _context: Any) -> None:
    session.info[_WROTE] = True
    # (In after_flush the session still holds what the flush wrote.)
    for instance in (*session.new, *session.dirty, *session.deleted):
        table = getattr(type(instance), "__table__", None)
        _note_table(session, getattr(table, "name", None) or "?")


@event.listens_for(UnitOfWork, "after_commit")
def _move_to_committed(session: Session) -> None:
    session.info.pop(_WROTE, None)
    session.info.pop(_UNDO, None)  # it committed: nothing to undo
    if pending := session.info.pop(_PENDING, None):
        session.info.setdefault(_COMMITTED, []).extend(pending)
    tables = session.info.pop(_TABLES, None)
    if tables:
        for watcher in session.info.get(COMMIT_WATCHERS, ()):
            try:
                watcher(frozenset(tables))
            except Exception:  # the commit stands
                log.exception("a watcher of committed writes failed")


@event.listens_for(UnitOfWork, "after_rollback")
def _drop_pending(session: Session) -> None:
    session.info.pop(_WROTE, None)
    session.info.pop(_PENDING, None)
    session.info.pop(_TABLES, None)


async def _run_after_commit(session: AsyncSession) -> None:
    for action in session.info.pop(_COMMITTED, ()):
        try:
            await action()
        except Exception:  # the commit stands; the request goes on
            log.exception("an action after a commit failed")


async def _run_undo(session: AsyncSession) -> None:
    for action in session.info.pop(_UNDO, ()):
        try:
            await action()
        except Exception:  # what it left is a sweeper's
            log.exception("undoing the work of a transaction that did not commit failed")


def create_sessionmaker(
    engine: AsyncEngine, info: dict[str, Any] | None = None
) -> async_sessionmaker[AsyncSession]:
    """Sessions for units of work that write; each starts with a copy of `info` (for instance
    the signal that wakes this process's job worker, jobs/queue.py). Where the engine's
    connections are waited for in turn, they take their places (`UnitOfWorkSession`); elsewhere
    (SQLite) they are SQLAlchemy's own, without a wrapper around each statement."""
    return async_sessionmaker(
        engine,
        class_=UnitOfWorkSession if line_of(engine) is not None else AsyncSession,
        expire_on_commit=False,
        autoflush=False,
        sync_session_class=UnitOfWork,
        info=info,
    )


def create_engines(
    url: str, *, pool_size: int = POOL_SIZE, **kwargs: Any
) -> tuple[AsyncEngine, AsyncEngine]:
    """An app's two engines, built from the same arguments: units of work's, and read-only
    requests' reads' (db/reads.py), where each statement is its own transaction.

    On PostgreSQL the reads get a pool of their own, opened in autocommit: each read is spared
    the driver's BEGIN and the pool's ROLLBACK (two round trips), and each check-out the switch
    to autocommit and back that an isolation-level option on a shared pool costs
    (docs/performance.md). SQLite's driver starts no transaction for a SELECT anyway, and its
    file needs one pool: both are the same engine.
    """
    engine = create_engine(url, pool_size=pool_size, **kwargs)
    if engine.dialect.name == "sqlite":
        return engine, engine
    reads = create_engine(url, pool_size=pool_size, **{**kwargs, "isolation_level": "AUTOCOMMIT"})
    # Fixed pools: the tasks past their size wait, in turn (db/turns.py).
    queue_fairly(engine, pool_size)
    queue_fairly(reads, pool_size)
    return engine, reads


async def finish(session: AsyncSession, *, ok: bool) -> None:
    """End a unit of work: commit it if `ok`, roll it back otherwise; then close.

    Raises what the commit raises (after rolling back), so a caller never reports success for a
    write that did not land. Either way the session's place in line (`UnitOfWorkSession`) and
    what `hold_until_ended` took are let go, and the `after_commit` actions of whatever did
    commit run last.
    """
    try:
        try:
            await _finish(session, ok=ok)
        finally:
            if isinstance(session, UnitOfWorkSession):
                session.leave_line()  # also where a place was taken but no connection
            if (held := session.info.pop(_HELD, None)) is not None:
                await held.aclose()
    finally:
        if _UNDO in session.info:  # its transaction never committed
            await _run_undo(session)
        if _COMMITTED in session.info:
            await _run_after_commit(session)


async def _finish(session: AsyncSession, *, ok: bool) -> None:
    if not session.in_transaction() and not (session.new or session.dirty or session.deleted):
        return  # never used: no connection to give back, nothing to write
    if not ok:
        await _discard(session)
        return
    try:
        await session.commit()
    except BaseException:
        await _discard(session)
        raise
    await session.close()


async def _discard(session: AsyncSession) -> None:
    # `async with` closes the session in a task of its own, which completes even if this one is
    # cancelled meanwhile: the connection goes back to the pool whatever happens.
    async with session:
        await session.rollback()

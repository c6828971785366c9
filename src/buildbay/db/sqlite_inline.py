"""SQLite for the embedded default, run on the event loop's own thread.

aiosqlite hands every DB-API call (cursor, execute, fetch, close, commit) to a worker thread and
back. Each hand-off costs far more than an indexed query's SQLite work, so a request spent
most of its time waiting on threads (docs/performance.md has the measurements). This driver runs
the calls inline: SQLAlchemy's async engine drives it through its own adapter classes, whose
methods here call sqlite3 directly instead of awaiting a coroutine for each call (every such
await is a round trip between greenlets, which costs more than a short query's SQLite work).

The one thing that could stall the event loop is waiting for another connection's write lock,
so the busy timeout is 0 and only a busy database takes the async path: it is retried with
`asyncio.sleep`, and the loop keeps serving requests meanwhile, including the one whose
transaction holds the lock.

URL: ``sqlite+inline:///path/to/file.sqlite3`` (the default); ``sqlite+aiosqlite://`` still works.

This is the one module of Buildbay that builds on a library's internals
(tests/test_public_apis.py refuses them anywhere else): SQLAlchemy's asyncio connector adapters
(`sqlalchemy.connectors.asyncio`), `sqlalchemy.util.await_` (also lent out, as `await_in_event`,
to the one synchronous event that must await: feeds/cache.py telling other processes of a
commit) and the pysqlite dialect's `_connection`. pyproject.toml bounds SQLAlchemy to
`>=2.1.7,<2.2`, and CI runs the suite on both ends of that range: the version uv.lock holds, and
the floor in the lowest-versions phase of .ci/run. Why it is worth it: the embedded default's
throughput (every DB-API call was a thread hand-off under aiosqlite; commits 07334a9 and
54b993c).
"""

from __future__ import annotations

import asyncio
import collections
import sqlite3
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from sqlalchemy import pool
from sqlalchemy.connectors.asyncio import (
    AsyncAdapt_dbapi_connection,
    AsyncAdapt_dbapi_cursor,
    AsyncAdapt_dbapi_module,
)
from sqlalchemy.dialects import registry
from sqlalchemy.dialects.sqlite.pysqlite import SQLiteDialect_pysqlite
from sqlalchemy.engine import URL
from sqlalchemy.util import await_

T = TypeVar("T")

LOCK_WAIT_SECONDS = 30.0
_FIRST_RETRY_DELAY = 0.001
_MAX_RETRY_DELAY = 0.05


def await_in_event(awaitable: Awaitable[T]) -> T:
    """Await `awaitable` from a synchronous SQLAlchemy event that its async layer runs (in its
    greenlet): db/engine.py's commit watchers. MissingGreenlet (sqlalchemy.exc) outside one."""
    return await_(awaitable)


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if code is None:
        return "database is locked" in str(exc)
    return code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


def _when_unlocked(operation: Callable[[], T]) -> T:
    """`operation()` now; if another connection holds the lock, retried without blocking."""
    try:
        return operation()
    except sqlite3.OperationalError as exc:
        if not _is_busy(exc):
            raise
    # Called inside SQLAlchemy's greenlet: await_ suspends this unit of work, not the loop.
    return await_(_retry_while_busy(operation))


async def _retry_while_busy(operation: Callable[[], T]) -> T:
    deadline = time.monotonic() + LOCK_WAIT_SECONDS
    delay = _FIRST_RETRY_DELAY
    while True:
        await asyncio.sleep(delay)
        delay = min(delay * 2, _MAX_RETRY_DELAY)
        try:
            return operation()
        except sqlite3.OperationalError as exc:
            if not _is_busy(exc) or time.monotonic() >= deadline:
                raise


async def _nothing() -> None:
    return None


def _statement_done() -> None:
    # AsyncConnection.execute refuses a statement during which the driver never awaited (its
    # guard against sync drivers): one await of a finished coroutine satisfies it, where the
    # base adapter's execute costs four round trips between greenlets.
    await_(_nothing())


class _Cursor(AsyncAdapt_dbapi_cursor):
    """SQLAlchemy's async cursor adapter over a plain sqlite3 cursor, called synchronously.

    Rows are fetched at execute, as the base class does, so that a busy error can only come
    from execute (and be waited out there).
    """

    __slots__ = ()
    _awaitable_cursor_close = False
    _cursor: sqlite3.Cursor  # type: ignore[assignment]

    def _aenter_cursor(self, cursor: Any) -> Any:
        return cursor

    def execute(self, operation: Any, parameters: Any = None) -> Any:
        cursor = self._cursor
        _when_unlocked(lambda: cursor.execute(operation, parameters or ()))
        if cursor.description:
            self._rows = collections.deque(cursor.fetchall())
        _statement_done()
        return cursor

    def executemany(self, operation: Any, seq_of_parameters: Any) -> Any:
        cursor, rows = self._cursor, list(seq_of_parameters)
        _when_unlocked(lambda: cursor.executemany(operation, rows))
        _statement_done()
        return cursor

    def close(self) -> None:
        self._rows.clear()
        self._cursor.close()


class _AdaptedConnection(AsyncAdapt_dbapi_connection):
    """What SQLAlchemy's pool and dialect hold: its usual adapter over a sqlite3 connection,
    plus the sqlite3 extras the SQLite dialect reaches for (isolation level, user functions)."""

    __slots__ = ()
    _cursor_cls = _Cursor
    _ss_cursor_cls = _Cursor  # type: ignore[assignment]  # SQLite has no server-side cursors
    _connection: sqlite3.Connection  # type: ignore[assignment]

    @property
    def isolation_level(self) -> str | None:
        return self._connection.isolation_level

    @isolation_level.setter
    def isolation_level(self, value: str | None) -> None:
        self._connection.isolation_level = value  # type: ignore[assignment]

    def create_function(self, *args: Any, **kwargs: Any) -> None:
        self._connection.create_function(*args, **kwargs)

    def commit(self) -> None:
        _when_unlocked(self._connection.commit)

    def rollback(self) -> None:
        self._connection.rollback()

    def close(self) -> None:
        self._connection.close()


class _DBAPI(AsyncAdapt_dbapi_module):
    def __init__(self) -> None:
        super().__init__(sqlite3, dbapi_module=sqlite3)
        self.paramstyle = "qmark"
        for name in (
            "DatabaseError",
            "Error",
            "IntegrityError",
            "InterfaceError",
            "NotSupportedError",
            "OperationalError",
            "ProgrammingError",
            "sqlite_version",
            "sqlite_version_info",
            "PARSE_COLNAMES",
            "PARSE_DECLTYPES",
            "Binary",
        ):
            setattr(self, name, getattr(sqlite3, name))

    def connect(self, *args: Any, **kwargs: Any) -> _AdaptedConnection:
        kwargs["timeout"] = 0  # never wait for a lock inside SQLite: _when_unlocked waits
        kwargs["check_same_thread"] = False  # the pool may close it from another thread
        return _AdaptedConnection(self, sqlite3.connect(*args, **kwargs))


class InlineSQLiteDialect(SQLiteDialect_pysqlite):
    driver = "inline"
    is_async = True
    supports_statement_cache = True

    @classmethod
    def import_dbapi(cls) -> Any:
        return _DBAPI()

    @classmethod
    def get_pool_class(cls, url: URL) -> type[pool.Pool]:
        if cls._is_url_file_db(url):
            return pool.AsyncAdaptedQueuePool
        return pool.StaticPool

    def get_driver_connection(self, connection: Any) -> Any:
        return connection._connection  # the sqlite3 connection


registry.register("sqlite.inline", __name__, "InlineSQLiteDialect")

"""SQLite for the embedded default, run on the event loop's own thread.

aiosqlite hands every DB-API call (cursor, execute, fetch, close, commit) to a worker thread and
back. On a small virtual machine each hand-off costs 150-300 µs, so a request with two indexed
queries spent milliseconds waiting on threads for microseconds of SQLite work. This driver runs
the calls inline: SQLAlchemy's async engine drives it through the same adapter classes it uses
for aiosqlite, but the coroutines finish without ever leaving the thread.

The one thing that could stall the event loop is waiting for another connection's write lock,
so the busy timeout is 0 and a busy database is retried with `asyncio.sleep`: the loop keeps
serving requests meanwhile, including the one whose transaction holds the lock.

URL: ``sqlite+inline:///path/to/file.sqlite3`` (the default); ``sqlite+aiosqlite://`` still works.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from sqlalchemy import pool
from sqlalchemy.connectors.asyncio import AsyncAdapt_dbapi_connection, AsyncAdapt_dbapi_module
from sqlalchemy.dialects import registry
from sqlalchemy.dialects.sqlite.pysqlite import SQLiteDialect_pysqlite
from sqlalchemy.engine import URL

T = TypeVar("T")

LOCK_WAIT_SECONDS = 30.0
_FIRST_RETRY_DELAY = 0.001
_MAX_RETRY_DELAY = 0.05


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if code is None:
        return "database is locked" in str(exc)
    return code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


async def _when_unlocked(operation: Callable[[], T]) -> T:
    deadline = time.monotonic() + LOCK_WAIT_SECONDS
    delay = _FIRST_RETRY_DELAY
    while True:
        try:
            return operation()
        except sqlite3.OperationalError as exc:
            if not _is_busy(exc) or time.monotonic() >= deadline:
                raise
        await asyncio.sleep(delay)
        delay = min(delay * 2, _MAX_RETRY_DELAY)


class _Cursor:
    """An asyncio DB-API cursor over sqlite3 whose coroutines complete inline."""

    __slots__ = ("_cursor",)

    def __init__(self, cursor: sqlite3.Cursor) -> None:
        self._cursor = cursor

    @property
    def description(self) -> Any:
        return self._cursor.description

    @property
    def rowcount(self) -> int:
        return self._cursor.rowcount

    @property
    def lastrowid(self) -> int | None:
        return self._cursor.lastrowid

    @property
    def arraysize(self) -> int:
        return self._cursor.arraysize

    @arraysize.setter
    def arraysize(self, value: int) -> None:
        self._cursor.arraysize = value

    async def execute(self, operation: str, parameters: Any = None) -> None:
        await _when_unlocked(lambda: self._cursor.execute(operation, parameters or ()))

    async def executemany(self, operation: str, seq_of_parameters: Any) -> None:
        rows = list(seq_of_parameters)
        await _when_unlocked(lambda: self._cursor.executemany(operation, rows))

    async def fetchone(self) -> Any:
        return self._cursor.fetchone()

    async def fetchmany(self, size: int | None = None) -> Sequence[Any]:
        return self._cursor.fetchmany(size if size is not None else self._cursor.arraysize)

    async def fetchall(self) -> Sequence[Any]:
        return self._cursor.fetchall()

    async def close(self) -> None:
        self._cursor.close()

    async def nextset(self) -> None:
        return None

    async def setinputsizes(self, *sizes: Any) -> None:
        return None

    async def __aenter__(self) -> _Cursor:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self._cursor.close()


class _Connection:
    """An asyncio DB-API connection over sqlite3 whose coroutines complete inline."""

    __slots__ = ("sqlite",)

    def __init__(self, connection: sqlite3.Connection) -> None:
        self.sqlite = connection

    def cursor(self) -> _Cursor:
        return _Cursor(self.sqlite.cursor())

    async def commit(self) -> None:
        await _when_unlocked(self.sqlite.commit)

    async def rollback(self) -> None:
        self.sqlite.rollback()

    async def close(self) -> None:
        self.sqlite.close()


class _AdaptedConnection(AsyncAdapt_dbapi_connection):
    """What SQLAlchemy's pool and dialect hold: its usual adapter, plus the sqlite3 extras the
    SQLite dialect reaches for (isolation level, user functions)."""

    __slots__ = ()
    _connection: _Connection  # type: ignore[assignment]

    @property
    def isolation_level(self) -> str | None:
        return self._connection.sqlite.isolation_level

    @isolation_level.setter
    def isolation_level(self, value: str | None) -> None:
        self._connection.sqlite.isolation_level = value  # type: ignore[assignment]

    def create_function(self, *args: Any, **kwargs: Any) -> None:
        self._connection.sqlite.create_function(*args, **kwargs)

    def close(self) -> None:
        self._connection.sqlite.close()


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
        connection = _Connection(sqlite3.connect(*args, **kwargs))
        return _AdaptedConnection(self, connection)  # type: ignore[arg-type]


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
        return connection._connection


registry.register("sqlite.inline", __name__, "InlineSQLiteDialect")

"""Engine and session factory. The request's session commits on success and rolls back on error."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from sqlalchemy import event, make_url
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)

import buildbay.db.sqlite_inline  # noqa: F401  (registers the sqlite+inline dialect)


def create_engine(url: str, **kwargs: Any) -> AsyncEngine:
    if url.startswith("sqlite"):
        # The inline driver waits for locks itself, without blocking the loop (busy timeout 0);
        # aiosqlite waits in its worker thread.
        inline = make_url(url).get_driver_name() == "inline"
        if not inline:
            kwargs.setdefault("connect_args", {"timeout": 30})
        engine = create_async_engine(url, **kwargs)

        @event.listens_for(engine.sync_engine, "connect")
        def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
            # WAL lets readers run beside the one writer; foreign keys make ON DELETE CASCADE work.
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            if not inline:
                cursor.execute("PRAGMA busy_timeout=30000")
            cursor.close()

        return engine
    kwargs.setdefault("pool_pre_ping", True)
    kwargs.setdefault("pool_size", 10)
    kwargs.setdefault("max_overflow", 10)
    return create_async_engine(url, **kwargs)


def create_sessionmaker(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    return async_sessionmaker(engine, expire_on_commit=False, autoflush=False)


@contextlib.asynccontextmanager
async def transaction(factory: async_sessionmaker[AsyncSession]) -> AsyncIterator[AsyncSession]:
    """A session whose work commits if the block succeeds and rolls back if it raises."""
    session = factory()
    try:
        yield session
        await session.commit()
    except BaseException:
        # `async with` closes the session in a task of its own, which completes even if this
        # one is cancelled meanwhile: the connection goes back to the pool whatever happens.
        async with session:
            await session.rollback()
        raise
    # The commit gave the connection back, so closing is bookkeeping without I/O, nothing to
    # protect: a plain close spares every request that task and a turn of the event loop.
    await session.close()

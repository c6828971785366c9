"""Engine and session factory. The request's session commits on success and rolls back on error."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Engine, Executable, Row, event, make_url
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)
from sqlalchemy.orm import ORMExecuteState, Session
from sqlalchemy.util import greenlet_spawn

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
    write that did not land.
    """
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


async def read_rows(
    session: AsyncSession, statement: Executable, params: Mapping[str, Any]
) -> Sequence[Row[Any]]:
    """The rows of one Core SELECT, as `session` sees them.

    A session already in a transaction reads on its connection (and sees its own writes).
    Otherwise the rows come from a pooled connection of the engine, taken, used and given back
    in one trip into SQLAlchemy's synchronous layer rather than one per step: on the hot list
    endpoint the ORM session and its greenlet round trips cost twice what this does
    (bench/api.py). The session is left unused, so a request never holds two connections
    (which a busy pool could deadlock on).
    """
    if session.in_transaction():
        return (await session.execute(statement, params)).all()
    assert session.bind is not None
    return await greenlet_spawn(_read_rows, session.bind.sync_engine, statement, params)


def _read_rows(
    engine: Engine, statement: Executable, params: Mapping[str, Any]
) -> Sequence[Row[Any]]:
    with engine.connect() as connection:
        return connection.execute(statement, params).all()

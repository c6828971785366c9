"""UnitOfWorkSession (db/engine.py) takes its place in line before any method that may run a
statement. It names those methods one by one: a coroutine method that a new SQLAlchemy adds to
AsyncSession would reach the pool without waiting its turn. This fails until it is sorted."""

from __future__ import annotations

import inspect

from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.db.engine import UnitOfWorkSession

# AsyncSession's coroutine methods that run no statement of their own: they end or drop the
# session's transaction and connection, and so never wait for one.
ENDING = {"aclose", "close", "invalidate", "reset", "rollback"}


def _coroutine_methods(cls: type) -> dict[str, object]:
    return {
        name: member
        for name, member in inspect.getmembers(cls)
        if not name.startswith("_")
        and inspect.iscoroutinefunction(member)
        and not isinstance(inspect.getattr_static(cls, name), classmethod)
    }


def test_every_coroutine_method_of_async_session_is_taken_in_turn_or_runs_no_statement() -> None:
    theirs = _coroutine_methods(AsyncSession)
    ours = _coroutine_methods(UnitOfWorkSession)
    unsorted = sorted(
        name for name, method in theirs.items() if ours[name] is method and name not in ENDING
    )
    assert unsorted == [], f"AsyncSession methods that skip the line: {unsorted}"
    wrapped = {name for name, method in theirs.items() if ours[name] is not method}
    assert {"execute", "flush", "commit", "get", "connection", "run_sync"} <= wrapped
    assert theirs.keys() >= ENDING, "a method named here is gone from AsyncSession"

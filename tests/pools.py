"""Who holds the connections of an app's pools: for tests that a request, or a verify waiting for
a reading process, holds no more connections than it should; and when an app starts a statement,
for the race tests that hold one request inside another's."""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import TYPE_CHECKING, Any

from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine

if TYPE_CHECKING:
    from fastapi import FastAPI


def when_written(app: FastAPI, *statements: str) -> asyncio.Event:
    """Set as soon as the app starts a statement beginning with one of `statements` (before it
    waits for any lock)."""
    seen = asyncio.Event()

    def note(_c: object, _cursor: object, sql: str, *_rest: object) -> None:
        if sql.lstrip().upper().startswith(statements):
            seen.set()

    event.listen(app.state.ctx.engine.sync_engine, "before_cursor_execute", note)
    return seen


class Checkouts:
    """While entered, each connection checked out of `engines`' pools (one pool on SQLite, where
    both engines are the same), with the task that took it, and the most held at once."""

    def __init__(self, *engines: AsyncEngine) -> None:
        self._engines = {engine.sync_engine for engine in engines}
        self.held: dict[object, asyncio.Task[Any] | None] = {}  # connection -> the task
        self.most = 0

    def __enter__(self) -> Checkouts:
        for engine in self._engines:
            event.listen(engine, "checkout", self._out)
            event.listen(engine, "checkin", self._in)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        for engine in self._engines:
            event.remove(engine, "checkout", self._out)
            event.remove(engine, "checkin", self._in)

    def _out(self, _dbapi: object, record: object, _proxy: object) -> None:
        self.held[record] = asyncio.current_task()
        self.most = max(self.most, len(self.held))

    def _in(self, _dbapi: object, record: object) -> None:
        self.held.pop(record, None)

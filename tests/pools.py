"""Who holds the connections of an app's pools: for tests that a request, or a verify waiting for
a reading process, holds no more connections than it should."""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import Any

from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine


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

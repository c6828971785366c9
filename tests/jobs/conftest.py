"""A job worker over a real database (the migrated copy each test gets), with a clock the test
moves and handlers the test writes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from buildbay.clock import FrozenClock
from buildbay.db.engine import create_engine, create_sessionmaker, finish
from buildbay.jobs.models import Job
from buildbay.jobs.queue import JOB_SIGNAL, JobSignal, enqueue
from buildbay.jobs.worker import Handler, JobWorker

LEASE = 60.0
RETRY_BASE = 10.0


@dataclass
class Outbox:
    engine: AsyncEngine
    sessions: async_sessionmaker[AsyncSession]
    signal: JobSignal
    clock: FrozenClock
    handlers: dict[str, Handler] = field(default_factory=dict)

    def worker(self, **options: Any) -> JobWorker:
        settings: dict[str, Any] = {
            "poll_seconds": 30.0,
            "lease_seconds": LEASE,
            "retry_base_seconds": RETRY_BASE,
            "jitter": lambda: 1.0,
        }
        return JobWorker(
            self.sessions, self.handlers, self.clock, self.signal, **(settings | options)
        )

    async def add(
        self, kind: str, payload: dict[str, Any], *, commit: bool = True, lane: str | None = None
    ) -> str:
        """A job written by a unit of work that commits (or, `commit=False`, rolls back)."""
        db = self.sessions()
        job = enqueue(db, kind, payload, self.clock.now(), lane=lane)
        await finish(db, ok=commit)
        return job.id

    async def job(self, job_id: str) -> Job | None:
        db = self.sessions()
        try:
            return await db.scalar(select(Job).where(Job.id == job_id))
        finally:
            await finish(db, ok=True)

    async def jobs(self) -> list[Job]:
        db = self.sessions()
        try:
            return list(await db.scalars(select(Job).order_by(Job.id)))
        finally:
            await finish(db, ok=True)


@pytest.fixture
async def outbox(database_url: str, clock: FrozenClock) -> AsyncIterator[Outbox]:
    engine = create_engine(database_url)
    signal = JobSignal()
    yield Outbox(engine, create_sessionmaker(engine, {JOB_SIGNAL: signal}), signal, clock)
    await engine.dispose()

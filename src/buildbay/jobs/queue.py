"""Writing jobs: in the caller's unit of work, so a job exists if and only if the change that
caused it committed. The worker of this process is woken as soon as that commit lands."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.db.engine import after_commit
from buildbay.ids import new_id
from buildbay.jobs.models import Job, JobStatus

# The key, in a unit of work's `info` (set by its sessionmaker), of this process's JobSignal.
JOB_SIGNAL = "buildbay.job_signal"


class JobSignal:
    """Tells this process's worker that a commit wrote a job, so it need not wait for its next
    poll. Other processes find the job at their poll (or their own commits' signals)."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    async def notify(self) -> None:
        self._event.set()

    def clear(self) -> None:
        self._event.clear()

    async def wait(self, seconds: float) -> None:
        """Until notified, or `seconds` have passed."""
        try:
            async with asyncio.timeout(seconds):
                await self._event.wait()
        except TimeoutError:
            pass


def enqueue(
    db: AsyncSession,
    kind: str,
    payload: dict[str, Any],
    now: datetime,
    *,
    run_after: datetime | None = None,
) -> Job:
    """Add a job of `kind` (a name in the worker's handlers) to `db`'s unit of work. It runs
    once that commits, never if it rolls back. `payload` must be JSON."""
    job = Job(
        id=new_id("job"),
        kind=kind,
        payload=payload,
        status=JobStatus.PENDING,
        attempts=0,
        run_after=run_after or now,
        claim=None,
        last_error=None,
        created_at=now,
        finished_at=None,
    )
    db.add(job)
    signal: JobSignal | None = db.info.get(JOB_SIGNAL)
    if signal is not None:
        after_commit(db, signal.notify)
    return job

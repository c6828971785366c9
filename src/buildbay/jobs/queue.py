"""Writing jobs: in the caller's unit of work, so a job exists if and only if the change that
caused it committed. The worker of this process is woken as soon as that commit lands."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Iterable
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Table
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.db.engine import after_commit, insert_pair, insert_rows
from buildbay.ids import new_id
from buildbay.jobs.models import Job, JobStatus

# The key, in a unit of work's `info` (set by its sessionmaker), of this process's JobSignal.
JOB_SIGNAL = "buildbay.job_signal"


class JobSignal:
    """Tells this process's worker that a commit wrote a job, so it need not wait for its next
    poll. Other processes find the job at their poll (or their own commits' signals)."""

    def __init__(self) -> None:
        self._event = asyncio.Event()
        # The lanes whose places in the worker are all taken (the worker keeps this set): a
        # commit that wrote jobs only to these lanes does not wake it, since none of them could
        # start. The worker looks again when one of their jobs ends.
        self.full_lanes: set[str] = set()

    async def notify(self, lanes: Iterable[str | None] = (None,)) -> None:
        """Wake the worker for jobs written to `lanes` (None: jobs without a lane)."""
        if all(lane is not None and lane in self.full_lanes for lane in lanes):
            return
        self._event.set()

    def clear(self) -> None:
        self._event.clear()

    def is_set(self) -> bool:
        """Whether the worker was told to look and has not yet."""
        return self._event.is_set()

    async def wait(self, seconds: float) -> None:
        """Until notified, or `seconds` have passed."""
        try:
            async with asyncio.timeout(seconds):
                await self._event.wait()
        except TimeoutError:
            pass


_JOBS = cast("Table", Job.__table__)


def new_job(
    kind: str,
    payload: dict[str, Any],
    now: datetime,
    *,
    run_after: datetime | None = None,
    lane: str | None = None,
) -> dict[str, Any]:
    """The columns of a pending job of `kind` (a name in the worker's handlers); `payload` must
    be JSON. Jobs of one `lane` take only a few of the worker's places at a time."""
    return {
        "id": new_id("job"),
        "kind": kind,
        "lane": lane,
        "payload": payload,
        "status": JobStatus.PENDING,
        "attempts": 0,
        "run_after": run_after or now,
        "claim": None,
        "last_error": None,
        "created_at": now,
        "finished_at": None,
    }


def enqueue(
    db: AsyncSession,
    kind: str,
    payload: dict[str, Any],
    now: datetime,
    *,
    run_after: datetime | None = None,
    lane: str | None = None,
) -> Job:
    """Add a job to `db`'s unit of work. It runs once that commits, never if it rolls back."""
    job = Job(**new_job(kind, payload, now, run_after=run_after, lane=lane))
    db.add(job)
    _wake_on_commit(db, (lane,))
    return job


async def enqueue_all(
    db: AsyncSession,
    jobs: list[dict[str, Any]],
    beside: tuple[Table, list[dict[str, Any]]] | None = None,
) -> None:
    """Write jobs made by `new_job` in `db`'s transaction, as `enqueue` does one: a webhook
    event's deliveries, a distribution's mails (`insert_rows`: multi-row INSERTs, without the
    unit of work's bookkeeping of an object per row). `beside` has rows of another table to
    write with them (the deliveries the jobs carry): one job and its row take one statement
    where the database allows (`insert_pair`)."""
    if beside is not None and len(jobs) == len(beside[1]) == 1:
        await insert_pair(db, (_JOBS, jobs[0]), (beside[0], beside[1][0]))
    else:
        await insert_rows(db, _JOBS, jobs)
        if beside is not None:
            await insert_rows(db, *beside)
    if jobs:
        _wake_on_commit(db, {job["lane"] for job in jobs})


def _wake_on_commit(db: AsyncSession, lanes: Iterable[str | None]) -> None:
    signal: JobSignal | None = db.info.get(JOB_SIGNAL)
    if signal is not None:
        after_commit(db, functools.partial(signal.notify, lanes))

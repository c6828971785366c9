"""The worker that runs the outbox's jobs, one in each `serve` process.

## Claiming

A due job is claimed by one conditional UPDATE that sets a claim of the worker's own and moves
`run_after` to the end of a lease (`JOB_LEASE_SECONDS`). On PostgreSQL the rows come from a
`SELECT ... FOR UPDATE SKIP LOCKED` inside that UPDATE: several processes claim at once, each
different jobs, none waiting for another. SQLite has one writer at a time, so the UPDATE alone
decides (its single process is the norm there). A job whose worker died mid-run (kill -9, a
lost machine) keeps its claim until the lease ends, and is then due again for anyone.

## Running

A worker runs up to `batch` jobs at once, claiming more as places free, oldest first.

The jobs of one lane (a webhook endpoint's deliveries) take at most `lane_places` of those
places, so a receiver that takes its 10 s, however many deliveries it has waiting, holds up its
own lane, not the other endpoints or the mail:
- A claim passes by the lanes that are full; a claimed job of a lane that is full goes back at
  once (unclaimed, its attempt not counted, due as from when it was written, so it keeps its
  turn in its lane), for this worker once a place of its lane frees, or for another.
- A commit that wrote jobs only to full lanes does not wake the worker (`JobSignal`): the claim
  could not start them. A job of a full lane that ends wakes it.
- A lane whose jobs have been quick (under QUICK_SECONDS on average, in this process) may take
  all but `lane_places` of the places: a receiver that answers at once gets its deliveries as
  fast as the worker makes them, and one that turns slow leaves places to the others. A lane
  starts limited until it has shown that.

A handler (one per job kind, in the registry given to the worker) runs with the job's payload
and a unit of work of its own. Whatever the handler writes in that unit of work commits together
with the job's completion, and only if the claim is still this worker's: for work that is only
database writes, a job takes effect exactly once. A handler gets half the lease to finish, so a
lease never runs out under a worker that is still running it.

Work outside the database (an SMTP server, a webhook receiver) cannot commit with the job: it
happens at least once. The window is between the outside world accepting the work and the commit
of the job's completion, which follows at once (a few milliseconds): a handler that wrote
nothing has its completion written together with those of the jobs that end meanwhile, one
UPDATE and one commit for all of them (a group commit). A process that dies inside that window
has its job run again when the lease ends; that, and a database that refuses the completion's
commit, are the only ways work is done twice.

## Failing

A handler that raises `JobFailed` fails its job for good (logged, and the reason kept in
`last_error`). Any other exception is retried with exponential backoff and jitter
(`JOB_RETRY_BASE_SECONDS`, doubled at each attempt up to RETRY_CAP, each wait between half and
all of that), until the job is older than RETRY_WINDOW (24 hours); then it fails.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import math
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, bindparam, delete, func, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from buildbay.clock import Clock
from buildbay.db.engine import finish
from buildbay.ids import new_id
from buildbay.jobs.models import Job, JobStatus
from buildbay.jobs.queue import JobSignal

log = logging.getLogger("buildbay.jobs")

RETRY_WINDOW = timedelta(hours=24)
RETRY_CAP = timedelta(minutes=30)
KEEP_DONE = timedelta(days=7)  # done jobs are deleted after this; failed ones are kept
BATCH = 10  # jobs a worker claims and runs at once
LANE_PLACES = 2  # of those, jobs of one lane (one webhook endpoint's deliveries)...
QUICK_SECONDS = 1.0  # ...unless its jobs take under this on average (then all places but those)
SMOOTHING = 0.3  # the weight of a lane's last job in its average
ERROR_LENGTH = 2000


class JobFailed(Exception):
    """A handler's refusal for good: the job fails now, with this message, without retries."""


@dataclass(frozen=True, slots=True)
class JobRun:
    """A claimed job, as its handler sees it."""

    id: str
    kind: str
    payload: dict[str, Any]
    attempt: int  # 1 for the first run
    created_at: datetime
    # The job's own unit of work: what the handler writes here commits with the job's
    # completion (see the module's docstring). Nothing is opened until it is used.
    db: AsyncSession


Handler = Callable[[JobRun], Awaitable[None]]

# The next pending job to become due after a claim: the due ones it left are in full lanes (a
# place of theirs freeing wakes the loop) or another worker's claim.
_NEXT_DUE = select(func.min(Job.run_after)).where(
    Job.status == JobStatus.PENDING, Job.run_after > bindparam("now")
)


@dataclass(slots=True)
class WorkerCounts:
    """What a worker has done since it was made. Tests prove what it did not do by these (and
    `JobWorker.settled`), not by waiting a while."""

    claims: int = 0  # claim statements run
    jobs_claimed: int = 0
    completion_writes: int = 0  # group commits of jobs whose handlers wrote nothing...
    completions_written: int = 0  # ...and the jobs in them


@dataclass(frozen=True, slots=True)
class _Claimed:
    id: str
    kind: str
    lane: str | None
    payload: dict[str, Any]
    attempts: int
    created_at: datetime
    claim: str


class JobWorker:
    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        handlers: Mapping[str, Handler],
        clock: Clock,
        signal: JobSignal,
        *,
        poll_seconds: float,
        lease_seconds: float,
        retry_base_seconds: float,
        batch: int = BATCH,
        lane_places: int = LANE_PLACES,
        quick_seconds: float = QUICK_SECONDS,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        self.sessions = sessions
        self.handlers = dict(handlers)
        self.clock = clock
        self.signal = signal
        self.poll = poll_seconds
        self.lease = timedelta(seconds=lease_seconds)
        self.retry_base = retry_base_seconds
        self.batch = batch
        self.lane_places = lane_places
        self.quick_seconds = quick_seconds
        self._lane_running: collections.Counter[str] = collections.Counter()
        # Each lane's average job, in seconds: one number per webhook endpoint it has served.
        self._lane_seconds: dict[str, float] = {}
        self.jitter = jitter
        self._task: asyncio.Task[None] | None = None
        self._running: set[asyncio.Task[None]] = set()
        # Set when a running job ends (or the worker stops): what the loop waits for while
        # every place is taken, so that the commits of busy requests do not wake it for nothing.
        self._freed = JobSignal()
        self._stopping = False
        self._last_cleanup: datetime | None = None
        # Jobs whose handlers wrote nothing, done and waiting for their completion to be
        # written; and the task writing them (see `_complete_together`).
        self._done: list[tuple[_Claimed, asyncio.Future[None]]] = []
        self._recording: asyncio.Task[None] | None = None
        self.counts = WorkerCounts()
        # What the loop sleeps on while it sleeps: new jobs (`signal`) or a freed place.
        self._sleeping_on: JobSignal | None = None

    # -- the loop ---------------------------------------------------------------------------------

    def start(self) -> None:
        self._stopping = False
        self._task = asyncio.create_task(self._run_forever(), name="buildbay-jobs")

    async def stop(self, grace: float = 10.0) -> None:
        """Claim nothing more; give the jobs that are running `grace` seconds to end, then
        cancel them (a cancelled job is handed back at once, not left to its lease)."""
        self._stopping = True
        if self._task is None:
            return
        await self._freed.notify()
        await self.signal.notify()
        running = set(self._running)
        if running:
            await asyncio.wait(running, timeout=grace)
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._task = None
        # The jobs still running after the grace are cancelled (each hands its job back).
        running = set(self._running)
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
        if self._recording is not None:
            with contextlib.suppress(Exception):
                await self._recording

    async def _run_forever(self) -> None:
        """Keeps up to `batch` jobs running, claiming more as soon as one ends: a slow job (a
        webhook receiver that takes its 10 s) holds its own place, not the others'."""
        while not self._stopping:
            # Cleared before looking: a commit that lands from here on sets it again, and one
            # that landed before is seen by the look. A job that ends sets it too.
            self.signal.clear()
            self._freed.clear()
            try:
                free = self.batch - len(self._running)
                if free <= 0:
                    # Every place taken: the next job to end wakes the loop, not a commit.
                    await self._sleep(self._freed, self.poll)
                    continue
                claimed, next_due = await self._start_due(free)
                if claimed == free:
                    continue  # there may be more due
                wait = self._until(next_due)
                await self._clean_up()
            except Exception:
                log.exception("the job worker failed a round; it tries again shortly")
                wait = self.poll
            if not self._stopping:
                await self._sleep(self.signal, wait)

    async def _sleep(self, wake: JobSignal, seconds: float) -> None:
        self._sleeping_on = wake
        try:
            await wake.wait(seconds)
        finally:
            self._sleeping_on = None

    @property
    def running(self) -> int:
        """How many jobs run now."""
        return len(self._running)

    def settled(self) -> bool:
        """Whether the loop sleeps with nothing yet asking it to look: it does nothing more
        until a commit writes a job, a running job ends or its poll comes."""
        wake = self._sleeping_on
        return wake is not None and not wake.is_set()

    async def _start_due(self, limit: int) -> tuple[int, datetime | None]:
        """Claim up to `limit` due jobs outside full lanes and start them, without waiting for
        them; those past their lane's places go back. Says how many were claimed, and when the
        next pending job becomes due if fewer than `limit` were."""
        claimed, next_due = await self._claim(limit, self.signal.full_lanes)
        past: list[_Claimed] = []
        for job in claimed:  # started in the order they were written (_claim)
            if job.lane is None:
                self._start(job)
            elif self._lane_running[job.lane] < self._lane_places(job.lane):
                self._lane_running[job.lane] += 1
                self._mark(job.lane)
                self._start(job)
            else:
                past.append(job)
        if past:
            await self._give_back(past)
        return len(claimed), next_due

    def _start(self, job: _Claimed) -> None:
        task = asyncio.create_task(self._run_and_tell(job))
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    def _lane_places(self, lane: str) -> int:
        """How many of the lane's jobs may run at once: `lane_places`, or all places but those
        if its jobs have been quick."""
        if self._lane_seconds.get(lane, math.inf) < self.quick_seconds:
            return max(self.batch - self.lane_places, self.lane_places)
        return self.lane_places

    def _mark(self, lane: str) -> bool:
        """Keep the signal's full lanes; says whether the lane is full."""
        full = self._lane_running[lane] >= self._lane_places(lane)
        if full:
            self.signal.full_lanes.add(lane)
        else:
            self.signal.full_lanes.discard(lane)
        return full

    async def _run_and_tell(self, job: _Claimed) -> None:
        started = time.monotonic()
        try:
            await self._run(job)
        finally:
            task = asyncio.current_task()
            if task is not None:
                self._running.discard(task)  # before the loop wakes to count the free places
            if job.lane is not None:
                await self._lane_job_ended(job.lane, time.monotonic() - started)
            # A place is free: a loop that waits with every place taken looks for more. One
            # that found fewer due jobs than free places sleeps on: a job's end makes nothing
            # due (a retry says so itself, and the jobs a handler writes wake it on commit).
            await self._freed.notify()

    async def _lane_job_ended(self, lane: str, seconds: float) -> None:
        """A job of the lane ended after `seconds`. A lane that was full takes claims again, and
        the loop looks for its jobs (it passed them by, and commits did not wake it for them)."""
        average = self._lane_seconds.get(lane, seconds)
        self._lane_seconds[lane] = average + (seconds - average) * SMOOTHING
        was_full = lane in self.signal.full_lanes
        self._lane_running[lane] -= 1
        if not self._mark(lane) and was_full and not self._stopping:
            await self.signal.notify()
        if self._lane_running[lane] <= 0:
            del self._lane_running[lane]

    def _until(self, next_due: datetime | None) -> float:
        """Seconds until `next_due` (at most the poll interval)."""
        if next_due is None:
            return self.poll
        return min(max((next_due - self.clock.now()).total_seconds(), 0.0), self.poll)

    async def _clean_up(self) -> None:
        """Delete done jobs older than KEEP_DONE, at most once an hour."""
        now = self.clock.now()
        if self._last_cleanup is not None and now - self._last_cleanup < timedelta(hours=1):
            return
        self._last_cleanup = now
        db = self.sessions()
        ok = False
        try:
            await db.execute(
                delete(Job).where(Job.status == JobStatus.DONE, Job.finished_at < now - KEEP_DONE)
            )
            ok = True
        finally:
            await finish(db, ok=ok)

    # -- one round --------------------------------------------------------------------------------

    async def run_due(self) -> int:
        """Claim the jobs due now (up to the batch size), run them, and say how many there
        were. Tests call this directly, with a clock they move."""
        claimed, _ = await self._claim()
        if not claimed:
            return 0
        lanes: dict[str, asyncio.Semaphore] = {}

        async def run(job: _Claimed) -> None:
            if job.lane is None:
                return await self._run(job)
            # As the loop runs them: a lane's jobs take turns for its places, in order.
            async with lanes.setdefault(job.lane, asyncio.Semaphore(self.lane_places)):
                return await self._run(job)

        tasks = [asyncio.create_task(run(job)) for job in claimed]
        self._running.update(tasks)
        try:
            await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            self._running.difference_update(tasks)
        return len(claimed)

    async def run_until_idle(self) -> int:
        """Run rounds until none is due (for tests); how many jobs ran."""
        total = 0
        while ran := await self.run_due():
            total += ran
        return total

    async def _claim(
        self, limit: int | None = None, full_lanes: set[str] | None = None
    ) -> tuple[list[_Claimed], datetime | None]:
        """Claim up to `limit` due jobs (the batch's size by default) outside `full_lanes`, in
        the order they were written. When fewer were found, the same transaction reads when the
        next pending job becomes due (None if none will), for the loop's sleep."""
        limit = limit or self.batch
        now = self.clock.now()
        claim = new_id("clm")
        # A CTE, not `id IN (subquery)`: PostgreSQL may run such a subquery more than once
        # for one UPDATE, and with SKIP LOCKED each run finds other rows, past the batch's size.
        # A CTE runs once.
        due = (
            select(Job.id)
            .where(Job.status == JobStatus.PENDING, Job.run_after <= now)
            .order_by(Job.run_after, Job.id)  # ids are time-ordered: the order written
            .limit(limit)
            .with_for_update(skip_locked=True)  # PostgreSQL; SQLite leaves it out
        )
        if full_lanes:
            # A full lane's due jobs are read past here, up to the limit: at each claim while
            # it is full, that is, at a commit of another lane's job or a poll.
            due = due.where(or_(Job.lane.is_(None), Job.lane.not_in(sorted(full_lanes))))
        due_ids = due.cte("due")
        statement = (
            update(Job)
            .where(Job.id == due_ids.c.id, Job.status == JobStatus.PENDING, Job.run_after <= now)
            .values(claim=claim, run_after=now + self.lease, attempts=Job.attempts + 1)
            .returning(Job.id, Job.kind, Job.lane, Job.payload, Job.attempts, Job.created_at)
            .execution_options(synchronize_session=False)
        )
        db = self.sessions()
        ok = False
        next_due = None
        try:
            rows = (await db.execute(statement)).all()
            if len(rows) < limit:
                next_due = await db.scalar(_NEXT_DUE, {"now": now})
            ok = True
        finally:
            await finish(db, ok=ok)
        self.counts.claims += 1
        self.counts.jobs_claimed += len(rows)
        # In the order they were written (ids are time-ordered), which RETURNING does not keep:
        # jobs written together (an endpoint's webhook deliveries) start in that order.
        claimed = sorted(
            (_Claimed(row[0], row[1], row[2], row[3], row[4], row[5], claim) for row in rows),
            key=lambda job: job.id,
        )
        return claimed, next_due

    async def _run(self, job: _Claimed) -> None:
        handler = self.handlers.get(job.kind)
        db = self.sessions()
        run = JobRun(job.id, job.kind, job.payload, job.attempts, job.created_at, db)
        try:
            if handler is None:
                raise JobFailed(f"no handler for jobs of kind {job.kind!r}")
            async with asyncio.timeout(self.lease.total_seconds() / 2):
                await handler(run)
        except asyncio.CancelledError:
            await finish(db, ok=False)
            await self._hand_back(job)
            raise
        except JobFailed as exc:
            await finish(db, ok=False)
            log.error("job %s (%s) failed for good: %s", job.id, job.kind, exc)
            await self._recorded(job, self._fail(job, str(exc)))
            return
        except Exception as exc:
            await finish(db, ok=False)
            await self._recorded(job, self._retry(job, exc))
            return
        if not db.in_transaction():
            # The handler wrote nothing (a mail, sent): its completion shares a commit with
            # those of the jobs that end meanwhile.
            await finish(db, ok=True)
            await self._recorded(job, self._complete_together(job))
            return
        await self._recorded(job, self._complete(job, db))

    async def _recorded(self, job: _Claimed, outcome: Awaitable[None]) -> None:
        try:
            await outcome
        except Exception:
            log.exception(
                "job %s (%s): its outcome could not be recorded; it runs again once its lease ends",
                job.id,
                job.kind,
            )

    # -- the outcomes, each conditional on the claim --------------------------------------------

    def _ours(self, job: _Claimed) -> Any:
        return update(Job).where(Job.id == job.id, Job.claim == job.claim)

    async def _complete(self, job: _Claimed, db: AsyncSession) -> None:
        done = self._ours(job).values(
            status=JobStatus.DONE, claim=None, finished_at=self.clock.now(), last_error=None
        )
        ok = False
        try:
            ok = bool((await db.execute(done)).rowcount)  # type: ignore[attr-defined]
            if not ok:
                log.warning(
                    "job %s (%s) outlived its lease and another worker took it; what it wrote "
                    "is rolled back",
                    job.id,
                    job.kind,
                )
        finally:
            await finish(db, ok=ok)

    async def _complete_together(self, job: _Claimed) -> None:
        """Record the completion of a job whose handler wrote nothing, with those of the jobs
        that end while another such write is under way: one UPDATE and one commit for all of
        them (a group commit), where a transaction each cost a busy database a good part of
        a distribution's work. Returns once it is written; raises what the write raised."""
        written: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._done.append((job, written))
        if self._recording is None or self._recording.done():
            self._recording = asyncio.create_task(self._record_done())
        await written

    async def _record_done(self) -> None:
        while self._done:
            group, self._done = self._done, []
            try:
                completed = await self._write_done([job for job, _ in group])
            except Exception as exc:
                for _, written in group:
                    if not written.done():
                        written.set_exception(exc)
                continue
            for job, written in group:
                if job.id not in completed:
                    log.warning(
                        "job %s (%s) outlived its lease and another worker took it",
                        job.id,
                        job.kind,
                    )
                if not written.done():
                    written.set_result(None)

    async def _write_done(self, jobs: list[_Claimed]) -> set[str]:
        """Mark the jobs done where their claims still hold; the ids of those that were."""
        statement = (
            update(Job)
            .where(_still_claimed(jobs))
            .values(
                status=JobStatus.DONE, claim=None, finished_at=self.clock.now(), last_error=None
            )
            .returning(Job.id)
            .execution_options(synchronize_session=False)
        )
        db = self.sessions()
        ok = False
        try:
            completed = set((await db.execute(statement)).scalars())
            ok = True
        finally:
            await finish(db, ok=ok)
        self.counts.completion_writes += 1
        self.counts.completions_written += len(jobs)
        return completed

    async def _retry(self, job: _Claimed, exc: Exception) -> None:
        now = self.clock.now()
        error = _describe(exc)
        if now - job.created_at >= RETRY_WINDOW:
            log.error(
                "job %s (%s) failed for good after %d attempts over %s: %s",
                job.id,
                job.kind,
                job.attempts,
                RETRY_WINDOW,
                error,
            )
            await self._fail(job, f"gave up after {job.attempts} attempts: {error}")
            return
        delay = self.backoff(job.attempts)
        log.warning(
            "job %s (%s) attempt %d failed, next in %.1f s: %s",
            job.id,
            job.kind,
            job.attempts,
            delay.total_seconds(),
            error,
            exc_info=not isinstance(exc, OSError | TimeoutError | RetryLater),
        )
        await self._write(
            self._ours(job).values(claim=None, run_after=now + delay, last_error=error)
        )
        await self.signal.notify()  # the loop's next wake-up may be later than this retry

    def backoff(self, attempts: int) -> timedelta:
        """The wait after the `attempts`-th failure: the base doubled for each earlier failure,
        capped, then between half and all of it (jitter, so that jobs that failed together do
        not all come back together)."""
        ceiling = min(self.retry_base * 2 ** min(attempts - 1, 40), RETRY_CAP.total_seconds())
        return timedelta(seconds=ceiling * (0.5 + 0.5 * self.jitter()))

    async def _fail(self, job: _Claimed, error: str) -> None:
        await self._write(
            self._ours(job).values(
                status=JobStatus.FAILED,
                claim=None,
                finished_at=self.clock.now(),
                last_error=error[:ERROR_LENGTH],
            )
        )

    async def _give_back(self, jobs: list[_Claimed]) -> None:
        """Claimed jobs that did not start go back, one UPDATE for all: unclaimed, the attempt
        their claim counted taken off, and due as from when they were written, so that each
        keeps its turn among its lane's jobs (the lane's later ones stay behind it)."""
        try:
            await self._write(
                update(Job)
                .where(_still_claimed(jobs))
                .values(claim=None, run_after=Job.created_at, attempts=Job.attempts - 1)
            )
        except Exception:
            log.exception("%d jobs past their lanes' places run once their lease ends", len(jobs))

    async def _hand_back(self, job: _Claimed) -> None:
        """A job cut off by a shutdown: due again now, for the next worker."""
        with contextlib.suppress(Exception):
            await self._write(self._ours(job).values(claim=None, run_after=self.clock.now()))

    async def _write(self, statement: Any) -> None:
        db = self.sessions()
        ok = False
        try:
            await db.execute(statement.execution_options(synchronize_session=False))
            ok = True
        finally:
            await finish(db, ok=ok)


def _still_claimed(jobs: list[_Claimed]) -> Any:
    """The rows of `jobs` whose claims still hold (a worker that lost its lease changes none)."""
    claims: dict[str, list[str]] = {}
    for job in jobs:
        claims.setdefault(job.claim, []).append(job.id)
    return or_(*(and_(Job.claim == c, Job.id.in_(ids)) for c, ids in claims.items()))


class RetryLater(Exception):
    """A handler's expected, passing failure (a server down or busy): retried, logged without a
    traceback."""


def _describe(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    if isinstance(exc, TimeoutError) and not str(exc):
        text = "the job took longer than half its lease"
    return text[:ERROR_LENGTH]

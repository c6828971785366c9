"""The outbox's worker on a real database: a job runs once its unit of work commits (and never
if it rolls back), failures are retried with backoff for 24 hours, a refusal fails at once, a
dead worker's job comes back when its lease ends, and a commit wakes the worker at once."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from buildbay.clock import SystemClock
from buildbay.jobs.models import JobStatus
from buildbay.jobs.queue import enqueue
from buildbay.jobs.worker import RETRY_CAP, RETRY_WINDOW, JobFailed, JobRun, JobWorker
from tests.jobs.conftest import LEASE, RETRY_BASE, Outbox


async def until(condition: Callable[[], bool], seconds: float = 10) -> None:
    """Until `condition` holds, looking between the event loop's other tasks."""
    async with asyncio.timeout(seconds):
        while not condition():  # noqa: ASYNC110 (counters and states, not events)
            await asyncio.sleep(0.001)


async def settled(worker: JobWorker) -> None:
    """Until the worker has done all it does now, and sleeps with nothing asking it to look."""
    await until(worker.settled)


def recording(outbox: Outbox, kind: str = "note") -> list[JobRun]:
    runs: list[JobRun] = []

    async def handler(run: JobRun) -> None:
        runs.append(run)

    outbox.handlers[kind] = handler
    return runs


async def test_a_committed_job_runs_once_and_a_rolled_back_one_never_exists(
    outbox: Outbox,
) -> None:
    runs = recording(outbox)
    kept = await outbox.add("note", {"n": 1})
    await outbox.add("note", {"n": 2}, commit=False)
    worker = outbox.worker()

    assert await worker.run_until_idle() == 1
    assert await worker.run_until_idle() == 0

    assert [(r.id, r.payload, r.attempt) for r in runs] == [(kept, {"n": 1}, 1)]
    [job] = await outbox.jobs()
    assert (job.id, job.status, job.attempts, job.claim) == (kept, JobStatus.DONE, 1, None)
    assert job.finished_at == outbox.clock.now()


async def test_a_failing_job_is_retried_with_growing_waits_until_it_succeeds(
    outbox: Outbox,
) -> None:
    failures = 3
    runs: list[int] = []

    async def flaky(run: JobRun) -> None:
        runs.append(run.attempt)
        if run.attempt <= failures:
            raise ConnectionRefusedError(f"refused at attempt {run.attempt}")

    outbox.handlers["flaky"] = flaky
    job_id = await outbox.add("flaky", {})
    worker = outbox.worker()

    await worker.run_until_idle()
    for attempt in range(1, failures + 1):
        job = await outbox.job(job_id)
        assert job is not None
        assert (job.status, job.attempts, job.claim) == (JobStatus.PENDING, attempt, None)
        assert job.last_error == f"refused at attempt {attempt}"
        wait = RETRY_BASE * 2 ** (attempt - 1)  # the jitter gives the whole wait here
        assert job.run_after == outbox.clock.now() + timedelta(seconds=wait)
        outbox.clock.advance(seconds=wait - 1)
        assert await worker.run_until_idle() == 0, "ran before its wait was over"
        outbox.clock.advance(seconds=1)
        assert await worker.run_until_idle() == 1

    job = await outbox.job(job_id)
    assert job is not None
    assert (job.status, job.attempts, job.last_error) == (JobStatus.DONE, failures + 1, None)
    assert runs == [1, 2, 3, 4]


async def test_retries_go_on_for_a_day_then_the_job_fails_with_its_last_error(
    outbox: Outbox,
) -> None:
    async def down(run: JobRun) -> None:
        raise TimeoutError("the server does not answer")

    outbox.handlers["down"] = down
    job_id = await outbox.add("down", {})
    worker = outbox.worker()
    started = outbox.clock.now()

    attempts = 0
    while (job := await outbox.job(job_id)) is not None and job.status is JobStatus.PENDING:
        outbox.clock.advance(seconds=(job.run_after - outbox.clock.now()).total_seconds())
        attempts += await worker.run_until_idle()
        assert attempts < 200

    assert job is not None
    assert job.status is JobStatus.FAILED
    assert job.last_error == f"gave up after {attempts} attempts: the server does not answer"
    assert job.finished_at is not None
    assert job.finished_at - started >= RETRY_WINDOW
    # The waits grew to the cap and stayed there: about a day's worth of attempts.
    assert attempts > RETRY_WINDOW / RETRY_CAP


async def test_a_refusal_fails_the_job_at_once(outbox: Outbox) -> None:
    async def refuse(run: JobRun) -> None:
        raise JobFailed("550 no such mailbox")

    outbox.handlers["refuse"] = refuse
    job_id = await outbox.add("refuse", {})
    unknown = await outbox.add("no-such-kind", {})
    worker = outbox.worker()

    assert await worker.run_until_idle() == 2
    outbox.clock.advance(days=2)
    assert await worker.run_until_idle() == 0

    job, other = await outbox.job(job_id), await outbox.job(unknown)
    assert job is not None
    assert other is not None
    assert (job.status, job.attempts, job.last_error) == (
        JobStatus.FAILED, 1, "550 no such mailbox"
    )  # fmt: skip
    assert (other.status, other.last_error) == (
        JobStatus.FAILED, "no handler for jobs of kind 'no-such-kind'"
    )  # fmt: skip


async def test_a_job_whose_worker_died_runs_again_once_its_lease_is_over(outbox: Outbox) -> None:
    runs = recording(outbox)
    job_id = await outbox.add("note", {})
    dead = outbox.worker()
    claimed, _ = await dead._claim()  # claimed, then the process died: nothing more happens
    assert [c.id for c in claimed] == [job_id]
    survivor = outbox.worker()

    outbox.clock.advance(seconds=LEASE - 1)
    assert await survivor.run_until_idle() == 0, "taken from a worker within its lease"
    outbox.clock.advance(seconds=1)
    assert await survivor.run_until_idle() == 1

    job = await outbox.job(job_id)
    assert job is not None
    assert (job.status, job.attempts) == (JobStatus.DONE, 2)
    assert [r.attempt for r in runs] == [2]
    # The dead worker's claim is no longer good for anything.
    await dead._retry(claimed[0], RuntimeError("late"))
    job = await outbox.job(job_id)
    assert job is not None
    assert (job.status, job.last_error) == (JobStatus.DONE, None)


async def test_what_a_handler_writes_commits_with_the_job_and_only_if_its_claim_holds(
    outbox: Outbox,
) -> None:
    async def chain(run: JobRun) -> None:
        # A job that writes another job: both or neither.
        enqueue(run.db, "note", {"from": run.id}, outbox.clock.now())
        if run.payload.get("lose_the_lease"):
            outbox.clock.advance(seconds=LEASE)
            await other.run_due()  # takes the job over meanwhile, and fails it

    async def fail(run: JobRun) -> None:
        raise JobFailed("taken over")

    outbox.handlers["chain"] = chain
    recording(outbox)
    worker, other = outbox.worker(), outbox.worker()
    kept = await outbox.add("chain", {})
    await worker.run_due()
    notes = [j for j in await outbox.jobs() if j.kind == "note"]
    assert [j.payload for j in notes] == [{"from": kept}]

    lost = await outbox.add("chain", {"lose_the_lease": True})
    outbox.handlers["chain-taken"] = fail
    other.handlers["chain"] = fail
    await worker.run_due()

    job = await outbox.job(lost)
    assert job is not None
    assert (job.status, job.last_error) == (JobStatus.FAILED, "taken over")
    notes = [j for j in await outbox.jobs() if j.kind == "note"]
    assert [j.payload for j in notes] == [{"from": kept}], "the late worker's write stayed"


def test_the_backoff_doubles_up_to_its_cap_and_jitter_takes_off_at_most_half() -> None:
    def worker(jitter: float) -> JobWorker:
        return JobWorker(None, {}, None, None, poll_seconds=1, lease_seconds=60,  # type: ignore[arg-type]
                         retry_base_seconds=RETRY_BASE, jitter=lambda: jitter)  # fmt: skip

    longest, shortest = worker(1.0), worker(0.0)
    for attempts in range(1, 30):
        ceiling = min(timedelta(seconds=RETRY_BASE * 2 ** (attempts - 1)), RETRY_CAP)
        assert longest.backoff(attempts) == ceiling
        assert shortest.backoff(attempts) == ceiling / 2
    assert longest.backoff(10**6) == RETRY_CAP


async def test_a_commit_that_writes_a_job_wakes_the_worker_long_before_its_poll(
    outbox: Outbox,
) -> None:
    done = asyncio.Event()

    async def handler(run: JobRun) -> None:
        done.set()

    outbox.handlers["note"] = handler
    poll = 60.0
    worker = outbox.worker(poll_seconds=poll)
    worker.start()
    try:
        await settled(worker)  # it has looked, found nothing, and waits
        started = time.monotonic()
        await outbox.add("note", {})
        await asyncio.wait_for(done.wait(), timeout=poll / 4)
        assert time.monotonic() - started < poll / 4
    finally:
        await worker.stop()


async def test_a_full_worker_starts_the_job_committed_meanwhile_as_soon_as_a_place_frees(
    outbox: Outbox,
) -> None:
    """With every place taken, the worker waits for a job to end rather than for commits; the
    job that ends wakes it, and the job committed meanwhile starts at once, not at the next
    poll."""
    held, release, noted = asyncio.Event(), asyncio.Event(), asyncio.Event()

    async def hold(run: JobRun) -> None:
        held.set()
        await release.wait()

    async def note(run: JobRun) -> None:
        noted.set()

    outbox.handlers.update(hold=hold, note=note)
    poll = 60.0
    worker = outbox.worker(poll_seconds=poll, batch=1)
    await outbox.add("hold", {})
    worker.start()
    try:
        await asyncio.wait_for(held.wait(), timeout=30)
        await outbox.add("note", {})
        await settled(worker)
        assert not noted.is_set(), "the only place is taken"
        assert worker.counts.claims == 1, "the commit made the full worker claim"

        started = time.monotonic()
        release.set()
        await asyncio.wait_for(noted.wait(), timeout=poll / 4)
        assert time.monotonic() - started < poll / 4
    finally:
        release.set()
        await worker.stop()


async def test_jobs_that_end_with_nothing_else_due_cost_no_more_claims(outbox: Outbox) -> None:
    """Once a claim found fewer due jobs than free places, the worker sleeps until a commit
    writes a job (or its poll): the jobs it started end without it looking again, each look
    a write transaction on a busy database."""
    runs = recording(outbox)
    worker = outbox.worker(poll_seconds=60.0)
    for n in range(3):
        await outbox.add("note", {"n": n})
    worker.start()
    try:
        await until(lambda: worker.counts.completions_written == 3 and worker.running == 0)
        await settled(worker)
        assert len(runs) == 3
        assert (worker.counts.claims, worker.counts.jobs_claimed) == (1, 3), (
            "one claim took all three, and their ends claimed nothing"
        )
    finally:
        await worker.stop()


async def test_a_retry_sooner_than_the_workers_next_look_runs_on_time(outbox: Outbox) -> None:
    attempts: list[int] = []
    succeeded = asyncio.Event()

    async def flaky(run: JobRun) -> None:
        attempts.append(run.attempt)
        if run.attempt == 1:
            raise OSError("the server is busy")
        succeeded.set()

    outbox.handlers["flaky"] = flaky
    await outbox.add("flaky", {})
    poll = 60.0
    # A real clock (whole seconds): the retry is due within a second, long before the poll.
    worker = JobWorker(
        outbox.sessions, outbox.handlers, SystemClock(), outbox.signal,
        poll_seconds=poll, lease_seconds=LEASE, retry_base_seconds=0.05,
    )  # fmt: skip
    worker.start()
    try:
        await asyncio.wait_for(succeeded.wait(), timeout=poll / 4)
        assert attempts == [1, 2]
    finally:
        await worker.stop()


async def test_jobs_that_wrote_nothing_and_end_together_are_recorded_in_one_write(
    outbox: Outbox,
) -> None:
    """A mail's job writes nothing but its completion: those that end while one completion is
    being written share the next write (a group commit), and each is done exactly when that
    write commits."""
    release = asyncio.Event()
    started: list[str] = []
    ended: list[str] = []

    async def sent(run: JobRun) -> None:
        started.append(run.id)
        await release.wait()
        ended.append(run.id)

    outbox.handlers["sent"] = sent
    worker = outbox.worker()
    ids = [await outbox.add("sent", {"n": n}) for n in range(6)]
    running = asyncio.create_task(worker.run_due())
    await until(lambda: len(started) == 6)
    release.set()

    assert await running == 6
    assert sorted(ended) == sorted(ids)
    writes = worker.counts.completion_writes
    assert worker.counts.completions_written == 6
    assert writes <= 2, f"six jobs ended at once, written in {writes} transactions"
    assert {job.status for job in await outbox.jobs()} == {JobStatus.DONE}


async def test_a_job_done_after_its_lease_passed_to_another_worker_is_left_to_that_one(
    outbox: Outbox,
) -> None:
    release, started = asyncio.Event(), asyncio.Event()

    async def sent(run: JobRun) -> None:
        started.set()
        await release.wait()

    outbox.handlers["sent"] = sent
    job_id = await outbox.add("sent", {})
    slow = asyncio.create_task(outbox.worker().run_due())
    await asyncio.wait_for(started.wait(), timeout=30)
    outbox.clock.advance(seconds=LEASE)
    [taken], _ = await outbox.worker()._claim()  # the lease is over: another worker claims it

    release.set()
    await slow

    job = await outbox.job(job_id)
    assert job is not None
    assert (job.status, job.claim) == (JobStatus.PENDING, taken.claim), "still the other's"


async def test_stopping_hands_a_running_job_back_at_once(outbox: Outbox) -> None:
    started = asyncio.Event()

    async def stuck(run: JobRun) -> None:
        started.set()
        await asyncio.sleep(3600)

    outbox.handlers["stuck"] = stuck
    job_id = await outbox.add("stuck", {})
    worker = outbox.worker()
    worker.start()
    await asyncio.wait_for(started.wait(), timeout=30)
    await worker.stop(grace=0.05)

    job = await outbox.job(job_id)
    assert job is not None
    assert (job.status, job.claim, job.attempts) == (JobStatus.PENDING, None, 1)
    assert job.run_after == outbox.clock.now(), "left to wait for its lease"


async def test_workers_claiming_at_once_never_run_a_job_twice(outbox: Outbox) -> None:
    """On PostgreSQL the claims run side by side (FOR UPDATE SKIP LOCKED); on SQLite one
    after another. Either way each job runs once, and a claim takes at most a batch."""
    ran: list[str] = []
    batch = 5

    async def slow(run: JobRun) -> None:
        ran.append(run.id)
        await asyncio.sleep(0.02)

    outbox.handlers["slow"] = slow
    ids = [await outbox.add("slow", {"n": n}) for n in range(60)]
    workers = [outbox.worker(batch=batch) for _ in range(4)]

    async def rounds(worker: JobWorker) -> list[int]:
        sizes = []
        while size := await worker.run_due():
            sizes.append(size)
        return sizes

    per_worker = await asyncio.gather(*(rounds(w) for w in workers))

    assert sorted(ran) == sorted(ids)
    assert all(size <= batch for sizes in per_worker for size in sizes), per_worker
    assert sum(1 for sizes in per_worker if sizes) > 1, f"one worker took everything: {per_worker}"
    jobs = await outbox.jobs()
    assert {j.status for j in jobs} == {JobStatus.DONE}
    assert {j.attempts for j in jobs} == {1}


class Gate:
    """A handler that records its job's payload and attempt, and holds each job until the
    test lets it go (`release`), one at a time or all at once."""

    def __init__(self) -> None:
        self.started: list[tuple[Any, int]] = []
        self.ended: list[Any] = []
        self._go: dict[Any, asyncio.Event] = {}
        self.arrived = asyncio.Event()

    async def __call__(self, run: JobRun) -> None:
        name = run.payload["name"]
        self.started.append((name, run.attempt))
        self.arrived.set()
        await self._go.setdefault(name, asyncio.Event()).wait()
        self.ended.append(name)

    def release(self, *names: Any) -> None:
        for name in names:
            self._go.setdefault(name, asyncio.Event()).set()

    def names(self) -> list[Any]:
        return [name for name, _ in self.started]

    async def until(self, condition: Any) -> None:
        async with asyncio.timeout(10):
            while not condition():
                self.arrived.clear()
                await self.arrived.wait()


async def test_a_lane_runs_at_most_its_places_in_order_while_the_other_jobs_go_by(
    outbox: Outbox,
) -> None:
    """A slow destination's jobs (a lane) take two places however many are due; jobs of other
    lanes and jobs without one, written after them, start at once; the lane's own start in
    the order they were written as its places free."""
    gate = Gate()
    outbox.handlers["hold"] = gate
    notes = recording(outbox)
    for n in range(6):
        await outbox.add("hold", {"name": f"slow{n}"}, lane="slow")
    await outbox.add("hold", {"name": "other"}, lane="other")
    await outbox.add("note", {})
    worker = outbox.worker(batch=4, lane_places=2, quick_seconds=0.0, poll_seconds=60.0)
    worker.start()
    try:
        await gate.until(lambda: len(gate.started) == 3)
        await settled(worker)
        assert sorted(gate.names()) == ["other", "slow0", "slow1"]
        assert len(notes) == 1, "the job without a lane did not wait for the lane"

        await outbox.add("hold", {"name": "later"}, lane="later")  # woken by the commit
        await gate.until(lambda: "later" in gate.names())
        for n in range(2, 6):
            gate.release(f"slow{n - 2}")
            await gate.until(lambda n=n: f"slow{n}" in gate.names())  # type: ignore[misc]
        await settled(worker)
        assert gate.names()[3:] == ["later", "slow2", "slow3", "slow4", "slow5"]
    finally:
        gate.release(*(name for name, _ in gate.started))
        await worker.stop()
    assert {(j.status, j.attempts) for j in await outbox.jobs()} == {(JobStatus.DONE, 1)}


async def test_a_commit_to_a_full_lane_leaves_the_worker_asleep(outbox: Outbox) -> None:
    """Its job could not start, and the claim would read past the lane's waiting jobs: the
    worker looks again when a place of the lane frees."""
    gate = Gate()
    outbox.handlers["hold"] = gate
    worker = outbox.worker(lane_places=1, quick_seconds=0.0, poll_seconds=60.0)
    await outbox.add("hold", {"name": "first"}, lane="hook")
    worker.start()
    try:
        await gate.until(lambda: gate.names() == ["first"])
        await settled(worker)
        before = worker.counts.claims
        await outbox.add("hold", {"name": "second"}, lane="hook")
        await settled(worker)
        assert worker.counts.claims == before, "a commit to the full lane woke the worker"

        gate.release("first")
        await gate.until(lambda: gate.names() == ["first", "second"])
        await settled(worker)
        assert (worker.counts.claims, worker.counts.jobs_claimed) == (before + 1, 2)
    finally:
        gate.release("first", "second")
        await worker.stop()


async def test_jobs_claimed_past_their_lanes_places_go_back_at_once_keeping_their_turn(
    outbox: Outbox,
) -> None:
    """Unclaimed (another process may take them), their attempt not counted, and due as from
    when they were written: the lane's later jobs do not pass them."""
    gate = Gate()
    outbox.handlers["hold"] = gate
    ids = [await outbox.add("hold", {"name": n}, lane="hook") for n in range(3)]
    outbox.clock.advance(seconds=5)  # claimed after they were written
    worker = outbox.worker(lane_places=1, quick_seconds=0.0, poll_seconds=60.0)
    worker.start()
    try:
        await gate.until(lambda: gate.names() == [0])
        await settled(worker)
        jobs = {job.id: job for job in await outbox.jobs()}
        assert jobs[ids[0]].claim is not None
        for later in ids[1:]:
            job = jobs[later]
            assert (job.status, job.claim, job.attempts) == (JobStatus.PENDING, None, 0)
            assert job.run_after == job.created_at

        outbox.clock.advance(seconds=1)
        await outbox.add("hold", {"name": 3}, lane="hook")  # written after them
        for n in range(3):
            gate.release(n)
            await gate.until(lambda n=n: len(gate.started) == n + 2)  # type: ignore[misc]
        assert gate.started == [(0, 1), (1, 1), (2, 1), (3, 1)]
    finally:
        gate.release(0, 1, 2, 3)
        await worker.stop()


async def test_a_lane_whose_jobs_end_quickly_takes_any_free_place(outbox: Outbox) -> None:
    """Limited until its jobs have shown they are quick (a receiver that answers at once), a
    lane then takes all places but its own number, which stay for the others should it turn
    slow."""
    running: list[str] = []
    ran: list[str] = []
    most = 0
    jobs = 40
    all_ran = asyncio.Event()

    async def quick(run: JobRun) -> None:
        nonlocal most
        running.append(run.id)
        most = max(most, len(running))
        await asyncio.sleep(0.01)
        running.remove(run.id)
        ran.append(run.id)
        if len(ran) == jobs:
            all_ran.set()

    outbox.handlers["quick"] = quick
    ids = [await outbox.add("quick", {}, lane="hook") for _ in range(jobs)]
    worker = outbox.worker(batch=8, lane_places=1, poll_seconds=60.0)
    worker.start()
    try:
        await asyncio.wait_for(all_ran.wait(), timeout=10)
    finally:
        await worker.stop()
    assert sorted(ran) == sorted(ids)
    assert most > 1, "the quick lane kept to one place"
    assert most <= 8 - 1, "the quick lane took every place"

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import JSON, Index, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from buildbay.db.base import Base, EnumString


class JobStatus(StrEnum):
    PENDING = "pending"  # to run at `run_after` (or running, while a worker's claim is on it)
    DONE = "done"
    FAILED = "failed"  # refused for good, or given up after the retry window


class Job(Base):
    """One piece of work of the outbox.

    A pending job is due once `run_after` has passed. A worker claims it by setting `claim` to a
    value of its own and `run_after` to the end of its lease: if the worker dies, the job is due
    again when the lease ends, and another worker (or this one restarted) takes it. Completing
    it, retrying it or failing it is conditional on the claim, so a worker that lost its lease
    cannot overwrite what the next one did.

    Jobs with a `lane` (a webhook endpoint's deliveries) take at most a few of a worker's places
    at a time, however many are due: a slow destination holds up its own lane, not the others
    (jobs/worker.py).
    """

    __tablename__ = "jobs"
    __table_args__ = (Index("ix_jobs_status_run_after", "status", "run_after"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    kind: Mapped[str] = mapped_column(String(50))
    lane: Mapped[str | None] = mapped_column(String(64))
    payload: Mapped[dict[str, Any]] = mapped_column(JSON)
    status: Mapped[JobStatus] = mapped_column(EnumString(JobStatus))
    attempts: Mapped[int]
    run_after: Mapped[datetime]
    claim: Mapped[str | None] = mapped_column(String(32))
    last_error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime]
    finished_at: Mapped[datetime | None]

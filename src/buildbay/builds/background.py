"""The job that checks a large multipart build's bytes after verify answered 202 (the build is
`processing` until it finishes: `ready`, or `failed` with the reason)."""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.applications.models import Application
from buildbay.applications.reads import APPLICATION
from buildbay.builds.service import VERIFY_JOB, BuildService
from buildbay.builds.updaters import UpdaterFields
from buildbay.db.reads import Reads
from buildbay.jobs.worker import Handler, JobRun

__all__ = ["VERIFY_JOB", "verify_handler"]


def verify_handler(build_service: Callable[[AsyncSession], BuildService]) -> Handler:
    """`build_service`: the build service on a job's unit of work (builds/dependencies.py)."""

    async def handle(run: JobRun) -> None:
        payload = run.payload
        row = await Reads.within(run.db).first(
            select(*APPLICATION.columns).where(Application.id == payload["applicationId"])
        )
        if row is None:
            return  # the application, and its builds, were deleted meanwhile
        service = build_service(run.db)
        await service.finish_verify(
            APPLICATION.of(row),
            payload["buildId"],
            payload.get("notes"),
            payload.get("channels"),
            bool(payload.get("mandatory")),
            UpdaterFields.of_json(payload.get("updater")),
        )

    return handle

"""A build's entries in the audit log (audit/record.py): made ready by a verify, deleted by a
member or by its application's retention rule."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.audit.record import Actor, AuditAction, Target, record
from buildbay.builds.records import BuildRecord


def record_build(
    db: AsyncSession,
    now: datetime,
    by: Actor,
    action: AuditAction,
    build: BuildRecord,
    **details: Any,
) -> None:
    """An entry about `build`: its file's name, size and digest, never a URL to its bytes."""
    facts: dict[str, Any] = {"applicationId": build.application_id, "fileSize": build.file_size}
    if build.sha256:
        facts["sha256"] = build.sha256
    record(db, at=now, actor=by, action=action, target=Target("build", build.id, build.file_name),
           project_id=build.project_id, details=facts | details)  # fmt: skip

"""A chat format's message as an endpoint would be sent it, made from a real build of the
project (its latest ready one, or one chosen), measured against the target's limits: the
console's preview (console/webhooks.py)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, select
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.applications.models import Application
from buildbay.builds.enums import BuildStatus
from buildbay.builds.models import Build
from buildbay.builds.reads import BuildReads
from buildbay.builds.schemas import version_label
from buildbay.db.reads import Reads
from buildbay.webhooks.chat import Check, Summary, body_of, checks, render, summary
from buildbay.webhooks.enums import WebhookFormat
from buildbay.webhooks.events import EventType, build_event_data, event_body

CHOICES = 20  # the project's latest ready builds offered to preview with

_LATEST = (
    select(
        Build.id,
        Build.application_id,
        Build.metadata_.label("metadata"),
        Build.file_name,
        Application.name.label("application"),
    )
    .join(Application, Application.id == Build.application_id)
    .where(Build.project_id == bindparam("project_id"), Build.status == BuildStatus.READY)
    .order_by(Build.created_at.desc(), Build.id.desc())
    .limit(CHOICES)
)


@dataclass(frozen=True, slots=True)
class BuildChoice:
    id: str
    application_id: str
    label: str  # "Acme Android 1.4.2 (42)"


@dataclass(frozen=True, slots=True)
class Preview:
    format: WebhookFormat
    builds: list[BuildChoice]
    build_id: str | None  # None: the project has no ready build; a test event is shown
    summary: Summary  # what the message says, as a person reads it
    body: str  # the message (or the standard event), indented
    bytes: int  # as sent
    checks: list[Check]  # empty for `standard`

    @property
    def within(self) -> bool:
        return all(c.ok for c in self.checks)


async def preview(
    db: AsyncSession,
    builds: BuildReads,
    project: Any,
    fmt: WebhookFormat,
    build_id: str | None,
    public_url: str,
    now: datetime,
) -> Preview:
    """The message of `build.ready` for the build `build_id` of the project (its latest ready
    build if None or not one of its latest), in format `fmt`."""
    rows = await Reads.within(db).all(_LATEST, {"project_id": project.id})
    choices = [
        BuildChoice(
            row["id"],
            row["application_id"],
            f"{row['application']} {version_label(row['metadata']) or row['file_name']}",
        )
        for row in rows
    ]
    chosen = next((c for c in choices if c.id == build_id), choices[0] if choices else None)
    if chosen is None:
        event = EventType.WEBHOOK_TEST
        data: dict[str, Any] = {
            "projectId": project.id,
            "projectName": project.name,
            "consoleUrl": f"{public_url}/projects/{project.id}",
            "message": "A test event sent from Buildbay",
        }
    else:
        event = EventType.BUILD_READY
        record = await builds.get(chosen.application_id, chosen.id)
        data = await build_event_data(db, record, public_url, now)
    if fmt is WebhookFormat.STANDARD:
        sent = event_body(event, data, now)
        found: list[Check] = []
    else:
        message = render(fmt, event.value, data)
        sent = body_of(message)
        found = checks(fmt, message)
    return Preview(
        fmt,
        choices,
        chosen.id if chosen else None,
        summary(event.value, data),
        json.dumps(json.loads(sent), indent=2, ensure_ascii=False),
        len(sent.encode()),
        found,
    )

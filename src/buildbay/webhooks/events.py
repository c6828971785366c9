"""Events: what the services emit, in the unit of work of the change they tell of. An event
becomes one delivery (and its outbox job) per enabled endpoint of the project that subscribed
to its type: a change that rolls back sends nothing, one that commits is never lost.

The body is written once, here, and sent byte for byte on every attempt: `{type, timestamp,
data}` as the Standard Webhooks spec shows it, `data` holding the object as the API returns it,
plus `projectId` and what makes the message readable on its own (`projectName`, and for a build
its application's name, version, uploader, console page and install page): a receiver posts it
to a chat without asking the API anything.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, cast

from pydantic import BaseModel
from sqlalchemy import Table, bindparam, select
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.applications.models import Application
from buildbay.applications.reads import application_view
from buildbay.applications.records import ApplicationRecord, ApplicationView
from buildbay.applications.schemas import application_schema
from buildbay.auth.reads import user_by_id
from buildbay.builds.extras import NONE as NO_EXTRAS
from buildbay.builds.extras import build_extras
from buildbay.builds.install import InstallTokens
from buildbay.builds.records import BuildRecord
from buildbay.builds.schemas import build_schema, version_label
from buildbay.console_urls import application_url, build_url, feedback_url, project_url
from buildbay.db.reads import Reads
from buildbay.ids import new_id
from buildbay.jobs.queue import enqueue, enqueue_all, new_job
from buildbay.projects.enums import ProjectRole
from buildbay.projects.models import Project
from buildbay.projects.records import MemberRecord
from buildbay.projects.schemas import member_schema
from buildbay.webhooks.chat import render_body
from buildbay.webhooks.enums import DeliveryStatus, SubscribableEvent, WebhookFormat
from buildbay.webhooks.models import Webhook, WebhookDelivery

WEBHOOK_JOB = "webhook"
# The units of work's `info` key of their `Addresses` (app.py puts them there, as jobs/queue.py's
# JOB_SIGNAL): an event names the console's pages and a build's live shared install link with
# them. A unit of work without them (an operator command's) sends no such addresses.
ADDRESSES = "buildbay.event_addresses"


@dataclass(frozen=True, slots=True)
class Addresses:
    public_url: str
    install_tokens: InstallTokens


def addresses_of(db: AsyncSession) -> Addresses | None:
    found: Addresses | None = db.info.get(ADDRESSES)
    return found


class EventType(StrEnum):
    BUILD_READY = "build.ready"
    BUILD_DELETED = "build.deleted"
    BUILD_DISTRIBUTED = "build.distributed"
    BUILD_DOWNLOADED = "build.downloaded"
    APPLICATION_CREATED = "application.created"
    APPLICATION_DELETED = "application.deleted"
    MEMBER_ADDED = "member.added"
    MEMBER_REMOVED = "member.removed"
    MEMBER_ROLE_CHANGED = "member.role_changed"
    DEVICE_ENROLLED = "device.enrolled"
    FEEDBACK_CREATED = "feedback.created"
    FEEDBACK_UPDATED = "feedback.updated"  # its status or assignee (feedback/triage.py)
    BUILD_FAILED = "build.failed"  # its background verification refused it (builds/background.py)
    WEBHOOK_TEST = "webhook.test"  # sent on request to one endpoint; not subscribed to


SUBSCRIBABLE = tuple(EventType(e.value) for e in SubscribableEvent)


def event_body(event_type: EventType, data: dict[str, Any], now: datetime) -> str:
    return json.dumps(
        {"type": event_type.value, "timestamp": _iso(now), "data": data},
        separators=(",", ":"),
        ensure_ascii=False,
    )


def _iso(value: datetime) -> str:
    return value.strftime("%Y-%m-%dT%H:%M:%SZ")


def as_data(obj: Data, project_id: str, **extra: Any) -> dict[str, Any]:
    """An API object (a response model) as an event's `data`: its JSON, plus `projectId`."""
    data = obj.model_dump(mode="json", by_alias=True) if isinstance(obj, BaseModel) else dict(obj)
    return {**data, **extra, "projectId": project_id}


Data = BaseModel | dict[str, Any]
# The event's data, or what makes it (run only when some endpoint wants the event).
DataSource = Data | Callable[[], Awaitable[Data]]

_DELIVERIES = cast("Table", WebhookDelivery.__table__)
_SUBSCRIBERS = select(Webhook.id, Webhook.events, Webhook.format).where(
    Webhook.project_id == bindparam("project_id"), Webhook.enabled.is_(True)
)


async def subscribers(
    reads: Reads, project_id: str, event_type: EventType
) -> list[tuple[str, WebhookFormat]]:
    """The ids (and formats) of the project's enabled endpoints that subscribed to
    `event_type`."""
    rows = await reads.all(_SUBSCRIBERS, {"project_id": project_id})
    return [
        (row["id"], WebhookFormat(row["format"]))
        for row in rows
        if event_type.value in row["events"]
    ]


def body_for(fmt: WebhookFormat, event_type: EventType, data: dict[str, Any], now: datetime) -> str:
    """What an endpoint of format `fmt` is sent for the event: the Standard Webhooks event,
    or the chat message made from it (chat.py)."""
    if fmt is WebhookFormat.STANDARD:
        return event_body(event_type, data, now)
    return render_body(fmt, event_type.value, data)


async def emit(
    db: AsyncSession,
    project_id: str,
    event_type: EventType,
    data: DataSource,
    now: datetime,
    *,
    targets: list[tuple[str, WebhookFormat]] | None = None,
    **extra: Any,
) -> int:
    """Queue the event for every enabled endpoint of the project that subscribed to its type
    (or for `targets`, found by `subscribers` beforehand), in `db`'s unit of work; how many
    deliveries that makes. Each endpoint gets the body of its format (the same `webhook-id`
    for all)."""
    if targets is None:
        targets = await subscribers(Reads.within(db), project_id, event_type)
    if not targets:
        return 0
    if callable(data):
        data = await data()
    shown = as_data(data, project_id, **extra)
    bodies = {fmt: body_for(fmt, event_type, shown, now) for fmt in {f for _, f in targets}}
    event_id = new_id("msg")
    # Core inserts, as few statements as the database allows (one for an event to one endpoint
    # on PostgreSQL, two for any number of endpoints): this runs in the request of every change
    # an endpoint subscribed to, where an object per row through the unit of work would add its
    # bookkeeping to each (bench/webhooks.py, docs/performance.md).
    deliveries = [new_delivery(w, event_id, event_type, bodies[f], now) for w, f in targets]
    # Each endpoint's deliveries are a lane of the outbox: a slow receiver holds up its own.
    jobs = [
        new_job(WEBHOOK_JOB, {"deliveryId": d["id"]}, now, lane=d["webhook_id"]) for d in deliveries
    ]
    for delivery, job in zip(deliveries, jobs, strict=True):
        delivery["job_id"] = job["id"]
    await enqueue_all(db, jobs, beside=(_DELIVERIES, deliveries))
    return len(targets)


def new_delivery(
    webhook_id: str, event_id: str, event_type: EventType, body: str, now: datetime
) -> dict[str, Any]:
    """The columns of a delivery of the event to one endpoint, due now (its job is set apart)."""
    return {
        "id": new_id("whd"),
        "webhook_id": webhook_id,
        "event_id": event_id,
        "event_type": event_type.value,
        "payload": body,
        "status": DeliveryStatus.PENDING,
        "attempts": 0,
        "step": 0,
        "next_attempt_at": now,
        "last_status_code": None,
        "last_error": None,
        "last_duration_ms": None,
        "last_response_body": None,
        "created_at": now,
        "delivered_at": None,
        "job_id": None,
    }


def queue_delivery(
    db: AsyncSession,
    webhook_id: str,
    event_id: str,
    event_type: EventType,
    body: str,
    now: datetime,
) -> WebhookDelivery:
    """One delivery, with its job, in `db`'s unit of work (a test event, sent on request)."""
    delivery = WebhookDelivery(**new_delivery(webhook_id, event_id, event_type, body, now))
    schedule(db, delivery, now)
    db.add(delivery)
    return delivery


def schedule(
    db: AsyncSession, delivery: WebhookDelivery, now: datetime, at: datetime | None = None
) -> None:
    """The delivery's next attempt at `at` (now, by default), carried by a new outbox job
    (the one before it, if any, finds it is no longer the delivery's and does nothing)."""
    at = at or now
    job = enqueue(
        db, WEBHOOK_JOB, {"deliveryId": delivery.id}, now, run_after=at, lane=delivery.webhook_id
    )
    delivery.job_id = job.id
    delivery.next_attempt_at = at
    delivery.status = DeliveryStatus.PENDING


# -- the events of each object, called by the services that change it -------------------------


_NAMES = (
    select(Project.name.label("project"), Application.name.label("application"))
    .join(Project, Project.id == Application.project_id)
    .where(Application.id == bindparam("application_id"))
)


async def _names(reads: Reads, project_id: str, application_id: str | None) -> dict[str, Any]:
    """`projectName` (and `applicationName`) of an event's data."""
    if application_id is None:
        name = await reads.scalar(select(Project.name).where(Project.id == project_id))
        return {"projectName": name}
    row = await reads.first(_NAMES, {"application_id": application_id})
    return {
        "projectName": row["project"] if row else None,
        "applicationName": row["application"] if row else None,
    }


def _build_data(
    db: AsyncSession, build: BuildRecord, public_url: str, now: datetime, *, gone: bool = False
) -> DataSource:
    """The build as the API shows it, plus what tells of it on its own: its project's and
    application's names, its version, its uploader, the console page to open (the
    application's for a build `gone`) and its live shared install link (`installUrl`), if it
    has one."""

    async def data() -> Data:
        reads = Reads.within(db)
        extras = (await build_extras(reads, [build.id], now)).get(build.id, NO_EXTRAS)
        addresses = addresses_of(db)
        install_url = None
        if extras.link is not None and addresses is not None and not gone:
            install_url = f"{public_url}/install/{addresses.install_tokens.token(extras.link.id)}"
        shown = build_schema(
            build, public_url, install_url, extras.channels, extras.downloads,
            rollouts=extras.rollouts, new_feedback_count=extras.new_feedback,
        )  # fmt: skip
        uploader = await user_by_id(reads, build.uploaded_by) if build.uploaded_by else None
        console = (
            application_url(public_url, build.project_id, build.application_id)
            if gone
            else build_url(public_url, build.project_id, build.application_id, build.id)
        )
        return {
            **shown.model_dump(mode="json", by_alias=True),
            **await _names(reads, build.project_id, build.application_id),
            "version": version_label(build.metadata_),
            "uploader": None
            if uploader is None
            else {"userId": uploader.id, "name": uploader.name, "email": uploader.email},
            "consoleUrl": console,
        }

    return data


async def build_ready(db: AsyncSession, build: BuildRecord, public_url: str, now: datetime) -> None:
    await emit(
        db, build.project_id, EventType.BUILD_READY, _build_data(db, build, public_url, now), now
    )


async def build_failed(
    db: AsyncSession, build: BuildRecord, public_url: str, now: datetime
) -> None:
    """Its background verification refused the build (builds/background.py): the build as it
    now is (`failed`, `failureCode`, `metadataError` saying why)."""
    data = _build_data(db, build, public_url, now)
    await emit(db, build.project_id, EventType.BUILD_FAILED, data, now)


async def build_event_data(
    db: AsyncSession, build: BuildRecord, public_url: str, now: datetime
) -> dict[str, Any]:
    """A build event's `data` for `build`, as `build.ready` would carry it (the console's
    preview of a chat format)."""
    data = _build_data(db, build, public_url, now)
    assert callable(data)
    return as_data(await data(), build.project_id)


async def build_deleted(
    db: AsyncSession, build: BuildRecord, public_url: str, now: datetime, *, reason: str
) -> None:
    """Before the build's row goes (its channels are read); `reason`: `member` (a member
    deleted it) or `retention` (the sweeper, by the application's rule)."""
    data = _build_data(db, build, public_url, now, gone=True)
    await emit(db, build.project_id, EventType.BUILD_DELETED, data, now, reason=reason)


async def build_distributed(
    db: AsyncSession, build: BuildRecord, public_url: str, now: datetime, **extra: Any
) -> None:
    """A build sent to testers; `extra` (camelCase) says to whom, as the distribution's API
    shows it."""
    data = _build_data(db, build, public_url, now)
    await emit(db, build.project_id, EventType.BUILD_DISTRIBUTED, data, now, **extra)


async def build_downloaded(
    db: AsyncSession,
    build: BuildRecord,
    user_id: str | None,
    link_id: str | None,
    public_url: str,
    now: datetime,
) -> None:
    """A download by `user_id` (None: through a shared install link, by whoever holds it),
    through the install link `link_id` if it went through one (a download that no webhook
    listens for costs one query)."""
    build_data = _build_data(db, build, public_url, now)

    async def data() -> Data:
        assert callable(build_data)
        user = await user_by_id(Reads.within(db), user_id) if user_id else None
        by = None if user is None else {"userId": user.id, "email": user.email, "name": user.name}
        return {**dict(await build_data()), "downloadedBy": by, "installLinkId": link_id}

    await emit(db, build.project_id, EventType.BUILD_DOWNLOADED, data, now)


async def feedback_created(
    db: AsyncSession,
    build: BuildRecord,
    feedback: Callable[[], Data],
    public_url: str,
    now: datetime,
) -> None:
    """A feedback sent on `build`; `feedback` makes it as the API shows it (run only when some
    endpoint wants the event), its screenshots' addresses signed for days: a receiver posts
    them to a chat."""

    async def data() -> Data:
        made = feedback()
        shown = made.model_dump(mode="json", by_alias=True) if isinstance(made, BaseModel) else made
        return {
            **shown,
            "applicationId": build.application_id,
            **await _names(Reads.within(db), build.project_id, build.application_id),
            "version": version_label(build.metadata_),
            "buildFileName": build.file_name,
            # The feedback's own page in the team's inbox (its build is linked from there).
            "consoleUrl": feedback_url(public_url, build.project_id, shown["id"]),
        }

    await emit(db, build.project_id, EventType.FEEDBACK_CREATED, data, now)


def _application_data(view: ApplicationView) -> Data:
    # The view a tester gets: an event never carries the update key.
    return application_schema(view, ProjectRole.TESTER)


def _told(
    db: AsyncSession, data: Data, project_id: str, console: Callable[[str], str]
) -> DataSource:
    """`data` with its project's name and the console page to open (`console` of the public
    URL)."""

    async def told() -> Data:
        names = await _names(Reads.within(db), project_id, None)
        shown = data.model_dump(mode="json", by_alias=True) if isinstance(data, BaseModel) else data
        addresses = addresses_of(db)
        url = console(addresses.public_url) if addresses is not None else None
        return {**shown, **names, "consoleUrl": url}

    return told


async def application_created(db: AsyncSession, view: ApplicationView, now: datetime) -> None:
    project_id, application_id = view.application.project_id, view.application.id
    data = _told(db, _application_data(view), project_id,
                 lambda url: application_url(url, project_id, application_id))  # fmt: skip
    await emit(db, project_id, EventType.APPLICATION_CREATED, data, now)


async def application_deleted(
    db: AsyncSession, application: ApplicationRecord, now: datetime
) -> None:
    """Before the application's row goes (its builds are counted)."""
    project_id = application.project_id

    async def data() -> Data:
        shown = _application_data(await application_view(Reads.within(db), application))
        told = _told(db, shown, project_id, lambda url: project_url(url, project_id))
        assert callable(told)
        return await told()

    await emit(db, project_id, EventType.APPLICATION_DELETED, data, now)


def _member_data(db: AsyncSession, member: MemberRecord) -> DataSource:
    project_id = member.project_id
    return _told(db, member_schema(member), project_id, lambda url: project_url(url, project_id))


async def member_added(db: AsyncSession, member: MemberRecord, now: datetime) -> None:
    await emit(db, member.project_id, EventType.MEMBER_ADDED, _member_data(db, member), now)


async def member_removed(db: AsyncSession, member: MemberRecord, now: datetime) -> None:
    await emit(db, member.project_id, EventType.MEMBER_REMOVED, _member_data(db, member), now)


async def member_role_changed(
    db: AsyncSession, member: MemberRecord, previous: ProjectRole, now: datetime
) -> None:
    data = _member_data(db, member)
    await emit(
        db, member.project_id, EventType.MEMBER_ROLE_CHANGED, data, now, previousRole=previous.value
    )


async def device_enrolled(
    db: AsyncSession, project_id: str, device: dict[str, Any], now: datetime
) -> None:
    """A member of the project enrolled a device (devices/service.py): `device` as the API
    shows it, with its tester; the project's page is the one to open."""
    data = _told(db, device, project_id, lambda url: project_url(url, project_id))
    await emit(db, project_id, EventType.DEVICE_ENROLLED, data, now)

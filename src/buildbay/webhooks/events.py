"""Events: what the services emit, in the unit of work of the change they tell of. An event
becomes one delivery (and its outbox job) per enabled endpoint of the project that subscribed
to its type: a change that rolls back sends nothing, one that commits is never lost.

The body is written once, here, and sent byte for byte on every attempt: `{type, timestamp,
data}` as the Standard Webhooks spec shows it, `data` holding the object as the API returns it,
plus `projectId`.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from datetime import datetime
from enum import StrEnum
from typing import Any, cast

from pydantic import BaseModel
from sqlalchemy import Table, bindparam, select
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.applications.reads import application_view
from buildbay.applications.records import ApplicationRecord, ApplicationView
from buildbay.applications.schemas import application_schema
from buildbay.auth.reads import UserRecord
from buildbay.builds.extras import NONE as NO_EXTRAS
from buildbay.builds.extras import build_extras
from buildbay.builds.records import BuildRecord
from buildbay.builds.schemas import build_schema
from buildbay.db.reads import Reads
from buildbay.ids import new_id
from buildbay.jobs.queue import enqueue, enqueue_all, new_job
from buildbay.projects.enums import ProjectRole
from buildbay.projects.records import MemberRecord
from buildbay.projects.schemas import member_schema
from buildbay.webhooks.enums import DeliveryStatus, SubscribableEvent
from buildbay.webhooks.models import Webhook, WebhookDelivery

WEBHOOK_JOB = "webhook"


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
_SUBSCRIBERS = select(Webhook.id, Webhook.events).where(
    Webhook.project_id == bindparam("project_id"), Webhook.enabled.is_(True)
)


async def subscribers(reads: Reads, project_id: str, event_type: EventType) -> list[str]:
    """The ids of the project's enabled endpoints that subscribed to `event_type`."""
    rows = await reads.all(_SUBSCRIBERS, {"project_id": project_id})
    return [row["id"] for row in rows if event_type.value in row["events"]]


async def emit(
    db: AsyncSession,
    project_id: str,
    event_type: EventType,
    data: DataSource,
    now: datetime,
    *,
    targets: list[str] | None = None,
    **extra: Any,
) -> int:
    """Queue the event for every enabled endpoint of the project that subscribed to its type
    (or for `targets`, found by `subscribers` beforehand), in `db`'s unit of work; how many
    deliveries that makes."""
    if targets is None:
        targets = await subscribers(Reads.within(db), project_id, event_type)
    if not targets:
        return 0
    if callable(data):
        data = await data()
    body = event_body(event_type, as_data(data, project_id, **extra), now)
    event_id = new_id("msg")
    # Core inserts, as few statements as the database allows (one for an event to one endpoint
    # on PostgreSQL, two for any number of endpoints): this runs in the request of every change
    # an endpoint subscribed to, where an object per row through the unit of work would add its
    # bookkeeping to each (bench/webhooks.py, docs/performance.md).
    deliveries = [new_delivery(w, event_id, event_type, body, now) for w in targets]
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


def _build_data(db: AsyncSession, build: BuildRecord, public_url: str, now: datetime) -> DataSource:
    async def data() -> Data:
        extras = (await build_extras(Reads.within(db), [build.id], now)).get(build.id, NO_EXTRAS)
        return build_schema(build, public_url, None, extras.channels, extras.downloads)

    return data


async def build_ready(db: AsyncSession, build: BuildRecord, public_url: str, now: datetime) -> None:
    await emit(
        db, build.project_id, EventType.BUILD_READY, _build_data(db, build, public_url, now), now
    )


async def build_deleted(
    db: AsyncSession, build: BuildRecord, public_url: str, now: datetime, *, reason: str
) -> None:
    """Before the build's row goes (its channels are read); `reason`: `member` (a member
    deleted it) or `retention` (the sweeper, by the application's rule)."""
    data = _build_data(db, build, public_url, now)
    await emit(db, build.project_id, EventType.BUILD_DELETED, data, now, reason=reason)


async def build_distributed(
    db: AsyncSession, build: BuildRecord, public_url: str, now: datetime, **extra: Any
) -> None:
    """A build sent to testers; `extra` (camelCase) says to whom, as the distribution's API
    shows it."""
    data = _build_data(db, build, public_url, now)
    await emit(db, build.project_id, EventType.BUILD_DISTRIBUTED, data, now, **extra)


async def build_downloaded(
    db: AsyncSession, build: BuildRecord, user: UserRecord, public_url: str, now: datetime
) -> None:
    """A download by `user` (a download that no webhook listens for costs one query)."""
    by = {"userId": user.id, "email": user.email, "name": user.name}
    data = _build_data(db, build, public_url, now)
    await emit(db, build.project_id, EventType.BUILD_DOWNLOADED, data, now, downloadedBy=by)


def _application_data(view: ApplicationView) -> Data:
    # The view a tester gets: an event never carries the update key.
    return application_schema(view, ProjectRole.TESTER)


async def application_created(db: AsyncSession, view: ApplicationView, now: datetime) -> None:
    project_id = view.application.project_id
    await emit(db, project_id, EventType.APPLICATION_CREATED, _application_data(view), now)


async def application_deleted(
    db: AsyncSession, application: ApplicationRecord, now: datetime
) -> None:
    """Before the application's row goes (its builds are counted)."""

    async def data() -> Data:
        return _application_data(await application_view(Reads.within(db), application))

    await emit(db, application.project_id, EventType.APPLICATION_DELETED, data, now)


async def member_added(db: AsyncSession, member: MemberRecord, now: datetime) -> None:
    await emit(db, member.project_id, EventType.MEMBER_ADDED, member_schema(member), now)


async def member_removed(db: AsyncSession, member: MemberRecord, now: datetime) -> None:
    await emit(db, member.project_id, EventType.MEMBER_REMOVED, member_schema(member), now)


async def member_role_changed(
    db: AsyncSession, member: MemberRecord, previous: ProjectRole, now: datetime
) -> None:
    data = member_schema(member)
    await emit(
        db, member.project_id, EventType.MEMBER_ROLE_CHANGED, data, now, previousRole=previous.value
    )

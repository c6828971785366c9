"""Events: what the services emit, in the unit of work of the change they tell of. An event
becomes one delivery (and its outbox job) per enabled endpoint of the project that subscribed
to its type: a change that rolls back sends nothing, one that commits is never lost.

The body is written once, here, and sent byte for byte on every attempt: `{type, timestamp,
data}` as the Standard Webhooks spec shows it, `data` holding the object as the API returns it,
plus `projectId`.
"""

from __future__ import annotations

import json
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.ids import new_id
from buildbay.jobs.queue import enqueue
from buildbay.webhooks.models import DeliveryStatus, Webhook, WebhookDelivery

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


# What an endpoint may subscribe to.
SUBSCRIBABLE = tuple(t for t in EventType if t is not EventType.WEBHOOK_TEST)


def event_body(event_type: EventType, data: dict[str, Any], now: datetime) -> str:
    return json.dumps(
        {"type": event_type.value, "timestamp": _iso(now), "data": data},
        separators=(",", ":"),
        ensure_ascii=False,
    )


def _iso(value: datetime) -> str:
    return value.strftime("%Y-%m-%dT%H:%M:%SZ")


def as_data(obj: BaseModel | dict[str, Any], project_id: str, **extra: Any) -> dict[str, Any]:
    """An API object (a response model) as an event's `data`: its JSON, plus `projectId`."""
    data = obj.model_dump(mode="json", by_alias=True) if isinstance(obj, BaseModel) else dict(obj)
    return {**data, **extra, "projectId": project_id}


async def emit(
    db: AsyncSession,
    project_id: str,
    event_type: EventType,
    data: BaseModel | dict[str, Any],
    now: datetime,
    **extra: Any,
) -> int:
    """Queue the event for every enabled endpoint of the project that subscribed to its type,
    in `db`'s unit of work; how many deliveries that makes."""
    rows = (
        await db.execute(
            select(Webhook.id, Webhook.events).where(
                Webhook.project_id == project_id, Webhook.enabled.is_(True)
            )
        )
    ).all()
    targets = [webhook_id for webhook_id, events in rows if event_type.value in events]
    if not targets:
        return 0
    body = event_body(event_type, as_data(data, project_id, **extra), now)
    event_id = new_id("msg")
    for webhook_id in targets:
        queue_delivery(db, webhook_id, event_id, event_type, body, now)
    return len(targets)


def queue_delivery(
    db: AsyncSession,
    webhook_id: str,
    event_id: str,
    event_type: EventType,
    body: str,
    now: datetime,
) -> WebhookDelivery:
    delivery = WebhookDelivery(
        id=new_id("whd"),
        webhook_id=webhook_id,
        event_id=event_id,
        event_type=event_type.value,
        payload=body,
        status=DeliveryStatus.PENDING,
        attempts=0,
        step=0,
        next_attempt_at=now,
        last_status_code=None,
        last_error=None,
        last_duration_ms=None,
        last_response_body=None,
        created_at=now,
        delivered_at=None,
    )
    schedule(db, delivery, now)
    db.add(delivery)
    return delivery


def schedule(
    db: AsyncSession, delivery: WebhookDelivery, now: datetime, at: datetime | None = None
) -> None:
    """The delivery's next attempt at `at` (now, by default), carried by a new outbox job
    (the one before it, if any, finds it is no longer the delivery's and does nothing)."""
    at = at or now
    job = enqueue(db, WEBHOOK_JOB, {"deliveryId": delivery.id}, now, run_after=at)
    delivery.job_id = job.id
    delivery.next_attempt_at = at
    delivery.status = DeliveryStatus.PENDING

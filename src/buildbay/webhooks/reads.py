"""Webhooks as read (db/reads.py): endpoints, deliveries (newest first, by page) and attempts."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import bindparam, select

from buildbay.db.reads import Reads, RecordOf
from buildbay.errors import NotFound
from buildbay.ids import split_page
from buildbay.webhooks.enums import DeliveryStatus, WebhookFormat
from buildbay.webhooks.models import Webhook, WebhookAttempt, WebhookDelivery


@dataclass(frozen=True, slots=True)
class WebhookRecord:
    id: str
    project_id: str
    url: str
    description: str
    events: list[str]
    format: WebhookFormat
    enabled: bool
    disabled_reason: str | None
    secret: str
    previous_secret: str | None
    previous_secret_expires_at: datetime | None
    created_at: datetime
    failing_since: datetime | None
    last_delivery_at: datetime | None


@dataclass(frozen=True, slots=True)
class DeliveryRecord:
    id: str
    webhook_id: str
    event_id: str
    event_type: str
    status: DeliveryStatus
    attempts: int
    next_attempt_at: datetime | None
    last_status_code: int | None
    last_error: str | None
    last_duration_ms: int | None
    created_at: datetime
    delivered_at: datetime | None


@dataclass(frozen=True, slots=True)
class DeliveryDetail:
    delivery: DeliveryRecord
    payload: str
    last_response_body: str | None
    attempts: list[AttemptRecord]


@dataclass(frozen=True, slots=True)
class AttemptRecord:
    id: str
    attempted_at: datetime
    status_code: int | None
    error: str | None
    duration_ms: int


WEBHOOK = RecordOf(WebhookRecord, Webhook)
DELIVERY = RecordOf(DeliveryRecord, WebhookDelivery)
ATTEMPT = RecordOf(AttemptRecord, WebhookAttempt)

_BY_ID = select(*WEBHOOK.columns).where(Webhook.id == bindparam("id"))
_OF_PROJECT = (
    select(*WEBHOOK.columns)
    .where(Webhook.project_id == bindparam("project_id"))
    .order_by(Webhook.id)
)
_ONE = _BY_ID.where(Webhook.project_id == bindparam("project_id"))
_DELIVERIES = (
    select(*DELIVERY.columns)
    .where(WebhookDelivery.webhook_id == bindparam("webhook_id"))
    .order_by(WebhookDelivery.id.desc())
    .limit(bindparam("limit"))
)
_DELIVERIES_AFTER = _DELIVERIES.where(WebhookDelivery.id < bindparam("after_id"))
_DELIVERY = select(
    *DELIVERY.columns, WebhookDelivery.payload, WebhookDelivery.last_response_body
).where(
    WebhookDelivery.webhook_id == bindparam("webhook_id"),
    WebhookDelivery.id == bindparam("delivery_id"),
)
_ATTEMPTS = (
    select(*ATTEMPT.columns)
    .where(WebhookAttempt.delivery_id == bindparam("delivery_id"))
    .order_by(WebhookAttempt.id)
)


def webhook_not_found() -> NotFound:
    return NotFound("No webhook with this id in the project", code="webhook_not_found")


def delivery_not_found() -> NotFound:
    return NotFound("No delivery with this id for this webhook", code="delivery_not_found")


async def webhooks_of(reads: Reads, project_id: str) -> list[WebhookRecord]:
    """The project's endpoints, oldest first."""
    return [WEBHOOK.of(row) for row in await reads.all(_OF_PROJECT, {"project_id": project_id})]


async def webhook_of(reads: Reads, project_id: str, webhook_id: str) -> WebhookRecord:
    row = await reads.first(_ONE, {"project_id": project_id, "id": webhook_id})
    if row is None:
        raise webhook_not_found()
    return WEBHOOK.of(row)


async def deliveries_of(
    reads: Reads, webhook_id: str, limit: int, after_id: str | None
) -> tuple[list[DeliveryRecord], str | None]:
    """A page of the endpoint's deliveries, newest first, and the next page's cursor."""
    params: dict[str, object] = {"webhook_id": webhook_id, "limit": limit + 1}
    if after_id is None:
        rows = await reads.all(_DELIVERIES, params)
    else:
        rows = await reads.all(_DELIVERIES_AFTER, {**params, "after_id": after_id})
    return split_page([DELIVERY.of(row) for row in rows], limit, lambda d: d.id)


async def delivery_detail(reads: Reads, webhook_id: str, delivery_id: str) -> DeliveryDetail:
    row = await reads.first(_DELIVERY, {"webhook_id": webhook_id, "delivery_id": delivery_id})
    if row is None:
        raise delivery_not_found()
    attempts = await reads.all(_ATTEMPTS, {"delivery_id": delivery_id})
    return DeliveryDetail(
        DELIVERY.of(row),
        row["payload"],
        row["last_response_body"],
        [ATTEMPT.of(a) for a in attempts],
    )

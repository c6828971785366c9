"""A project's webhook endpoints, one delivery per event and endpoint, and each attempt of it."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import JSON, ForeignKey, Index, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from buildbay.db.base import Base, EnumString
from buildbay.webhooks.enums import DeliveryStatus, WebhookFormat


class Webhook(Base):
    """An endpoint of a project, and the secret(s) that sign what is sent to it.

    The secret is kept as given out (`whsec_...`): signing needs it. After a rotation the
    previous one keeps signing beside the new one until `previous_secret_expires_at`.
    """

    __tablename__ = "webhooks"
    __table_args__ = (Index("ix_webhooks_project_id", "project_id"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    url: Mapped[str] = mapped_column(String(2048))
    description: Mapped[str] = mapped_column(String(500))
    events: Mapped[list[str]] = mapped_column(JSON)
    # What it is sent: the signed event (`standard`) or a chat message made from it.
    format: Mapped[WebhookFormat] = mapped_column(
        EnumString(WebhookFormat), default=WebhookFormat.STANDARD, server_default="standard"
    )
    enabled: Mapped[bool]
    disabled_reason: Mapped[str | None] = mapped_column(String(300))
    secret: Mapped[str] = mapped_column(String(100))
    previous_secret: Mapped[str | None] = mapped_column(String(100))
    previous_secret_expires_at: Mapped[datetime | None]
    created_at: Mapped[datetime]
    failing_since: Mapped[datetime | None]
    last_delivery_at: Mapped[datetime | None]


class WebhookDelivery(Base):
    """One event for one endpoint. `event_id` is the `webhook-id` header: the same on every
    attempt (and for every endpoint the event goes to), so receivers can deduplicate. `payload`
    is the body exactly as signed and sent, every time. `job_id` is the outbox job that carries
    its next attempt: a job that is no longer the delivery's (a manual retry replaced it) does
    nothing."""

    __tablename__ = "webhook_deliveries"
    __table_args__ = (Index("ix_webhook_deliveries_webhook_id_id", "webhook_id", "id"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    webhook_id: Mapped[str] = mapped_column(ForeignKey("webhooks.id", ondelete="CASCADE"))
    event_id: Mapped[str] = mapped_column(String(32))
    event_type: Mapped[str] = mapped_column(String(50))
    payload: Mapped[str] = mapped_column(Text)
    status: Mapped[DeliveryStatus] = mapped_column(EnumString(DeliveryStatus))
    attempts: Mapped[int]
    step: Mapped[int]  # attempts since the schedule (re)started: its position in RETRY_SCHEDULE
    job_id: Mapped[str | None] = mapped_column(String(32))
    next_attempt_at: Mapped[datetime | None]
    last_status_code: Mapped[int | None]
    last_error: Mapped[str | None] = mapped_column(String(500))
    last_duration_ms: Mapped[int | None]
    last_response_body: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime]
    delivered_at: Mapped[datetime | None]


class WebhookAttempt(Base):
    """One request made for a delivery (the delivery log's lines)."""

    __tablename__ = "webhook_attempts"
    __table_args__ = (Index("ix_webhook_attempts_delivery_id", "delivery_id"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    delivery_id: Mapped[str] = mapped_column(
        ForeignKey("webhook_deliveries.id", ondelete="CASCADE")
    )
    attempted_at: Mapped[datetime]
    status_code: Mapped[int | None]
    error: Mapped[str | None] = mapped_column(String(500))
    duration_ms: Mapped[int]

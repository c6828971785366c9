"""A project's webhook endpoints, changed in a unit of work (reading is reads.py's)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.audit.record import Actor, AuditAction, Target, record
from buildbay.config import Settings
from buildbay.console_urls import webhook_url
from buildbay.db.reads import Reads
from buildbay.errors import Conflict, ValidationFailed
from buildbay.ids import new_id
from buildbay.projects.records import ProjectRecord
from buildbay.webhooks.enums import SubscribableEvent, WebhookFormat
from buildbay.webhooks.events import (
    EventType,
    addresses_of,
    body_for,
    queue_delivery,
    schedule,
)
from buildbay.webhooks.models import Webhook, WebhookDelivery
from buildbay.webhooks.reads import (
    WEBHOOK,
    WebhookRecord,
    delivery_not_found,
    webhook_not_found,
)
from buildbay.webhooks.signing import new_secret
from buildbay.webhooks.transport import url_problem

# After a rotation the previous secret signs beside the new one this long, so receivers can
# switch over without losing a message.
ROTATION_OVERLAP = timedelta(hours=24)
MAX_WEBHOOKS_PER_PROJECT = 50


class WebhookService:
    def __init__(self, db: AsyncSession, now: datetime, settings: Settings) -> None:
        self.db = db
        self.now = now
        self.settings = settings
        self.reads = Reads.within(db)

    def check_url(self, url: str) -> None:
        problem = url_problem(
            url,
            allow_http=self.settings.webhook_allow_http,
            allow_private=self.settings.webhook_allow_private,
        )
        if problem:
            raise ValidationFailed.for_field("url", problem, code="webhook_url_refused")

    async def create(
        self,
        project: ProjectRecord,
        url: str,
        events: list[SubscribableEvent],
        description: str,
        format_: WebhookFormat = WebhookFormat.STANDARD,
        *,
        by: Actor,
    ) -> WebhookRecord:
        """The new endpoint, its secret in the record (shown this once)."""
        self.check_url(url)
        count = len(
            (
                await self.db.scalars(select(Webhook.id).where(Webhook.project_id == project.id))
            ).all()
        )
        if count >= MAX_WEBHOOKS_PER_PROJECT:
            raise Conflict(
                f"A project has at most {MAX_WEBHOOKS_PER_PROJECT} webhooks",
                code="too_many_webhooks",
            )
        webhook = Webhook(
            id=new_id("whk"),
            project_id=project.id,
            url=url,
            description=description,
            events=_unique(events),
            format=format_,
            enabled=True,
            disabled_reason=None,
            secret=new_secret(),
            previous_secret=None,
            previous_secret_expires_at=None,
            created_at=self.now,
            failing_since=None,
            last_delivery_at=None,
        )
        self.db.add(webhook)
        await self.db.flush()
        details = {"events": webhook.events, "format": format_.value}
        self._record(by, AuditAction.WEBHOOK_CREATED, webhook, details)
        return WEBHOOK.of_entity(webhook)

    async def update(
        self, project: ProjectRecord, webhook_id: str, changes: dict[str, Any], *, by: Actor
    ) -> WebhookRecord:
        """`changes` may hold url, events, description, format and enabled. Enabling an
        endpoint starts its failure count afresh. A new format applies to the events that
        follow (a delivery already made is sent again as it was)."""
        webhook = await self._webhook(project, webhook_id)
        if "url" in changes:
            self.check_url(changes["url"])
            webhook.url = changes["url"]
        if "events" in changes:
            webhook.events = _unique(changes["events"])
        if "description" in changes:
            webhook.description = changes["description"]
        if "format" in changes:
            webhook.format = WebhookFormat(changes["format"])
        if "enabled" in changes and changes["enabled"] != webhook.enabled:
            webhook.enabled = changes["enabled"]
            webhook.disabled_reason = None if webhook.enabled else "disabled by a project admin"
            if webhook.enabled:
                webhook.failing_since = None
        await self.db.flush()
        details: dict[str, Any] = {"changed": sorted(changes)}
        if "enabled" in changes:
            details["enabled"] = webhook.enabled
        self._record(by, AuditAction.WEBHOOK_CHANGED, webhook, details)
        return WEBHOOK.of_entity(webhook)

    async def delete(self, project: ProjectRecord, webhook_id: str, *, by: Actor) -> None:
        """The endpoint goes, with its delivery log; its pending deliveries are not sent."""
        webhook = await self._webhook(project, webhook_id)
        self._record(by, AuditAction.WEBHOOK_DELETED, webhook, {})
        await self.db.execute(delete(Webhook).where(Webhook.id == webhook_id))

    async def rotate_secret(self, project: ProjectRecord, webhook_id: str, *, by: Actor) -> str:
        """A new secret; the current one keeps signing beside it for ROTATION_OVERLAP."""
        webhook = await self._webhook(project, webhook_id)
        webhook.previous_secret = webhook.secret
        webhook.previous_secret_expires_at = self.now + ROTATION_OVERLAP
        webhook.secret = new_secret()
        await self.db.flush()
        self._record(by, AuditAction.WEBHOOK_CHANGED, webhook, {"changed": ["secret"]})
        return webhook.secret

    def _record(
        self, by: Actor, action: AuditAction, webhook: Webhook, details: dict[str, Any]
    ) -> None:
        """An entry naming the endpoint by its host only: a chat's webhook URL holds its
        credential in the path (Slack's, Discord's), and the secret never goes in."""
        target = Target("webhook", webhook.id, urlsplit(webhook.url).hostname or "")
        record(self.db, at=self.now, actor=by, action=action, target=target,
               project_id=webhook.project_id, details=details)  # fmt: skip

    async def send_test(self, project: ProjectRecord, webhook_id: str) -> WebhookDelivery:
        """A `webhook.test` event to this endpoint alone."""
        webhook = await self._webhook(project, webhook_id)
        if not webhook.enabled:
            raise Conflict("The webhook is disabled; enable it first", code="webhook_disabled")
        record = WEBHOOK.of_entity(webhook)
        addresses = addresses_of(self.db)
        data = {
            "webhookId": record.id,
            "url": record.url,
            "projectId": project.id,
            "projectName": project.name,
            "consoleUrl": webhook_url(addresses.public_url, project.id, record.id)
            if addresses is not None
            else None,
            "message": "A test event sent from Buildbay",
        }
        body = body_for(webhook.format, EventType.WEBHOOK_TEST, data, self.now)
        return queue_delivery(
            self.db, webhook.id, new_id("msg"), EventType.WEBHOOK_TEST, body, self.now
        )

    async def retry(self, project: ProjectRecord, webhook_id: str, delivery_id: str) -> None:
        """Send the delivery again now (the same body and `webhook-id`), whatever its state,
        with its retry schedule started afresh."""
        webhook = await self._webhook(project, webhook_id)
        if not webhook.enabled:
            raise Conflict("The webhook is disabled; enable it first", code="webhook_disabled")
        delivery = await self.db.scalar(
            select(WebhookDelivery)
            .where(WebhookDelivery.id == delivery_id, WebhookDelivery.webhook_id == webhook_id)
            .with_for_update()
        )
        if delivery is None:
            raise delivery_not_found()
        delivery.step = 0
        schedule(self.db, delivery, self.now)

    async def retry_delivery(self, project: ProjectRecord, delivery_id: str) -> str:
        """`retry`, for a delivery named alone (as the delivery log and `buildbay webhooks
        retry` show it): its webhook is the project's one it belongs to. Its webhook's id."""
        webhook_id = await self.db.scalar(
            select(WebhookDelivery.webhook_id)
            .join(Webhook, Webhook.id == WebhookDelivery.webhook_id)
            .where(WebhookDelivery.id == delivery_id, Webhook.project_id == project.id)
        )
        if webhook_id is None:
            raise delivery_not_found()
        await self.retry(project, webhook_id, delivery_id)
        return webhook_id

    async def _webhook(self, project: ProjectRecord, webhook_id: str) -> Webhook:
        webhook = await self.db.scalar(
            select(Webhook)
            .where(Webhook.id == webhook_id, Webhook.project_id == project.id)
            .with_for_update()
        )
        if webhook is None:
            raise webhook_not_found()
        return webhook


def _unique(events: list[SubscribableEvent]) -> list[str]:
    return [e.value for e in dict.fromkeys(events)]

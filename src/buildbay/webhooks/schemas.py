from __future__ import annotations

from typing import Annotated, Any, ClassVar

from pydantic import Field

from buildbay.schemas import ApiModel, RequestModel, Timestamp, Trimmed
from buildbay.webhooks.enums import DeliveryStatus, SubscribableEvent, WebhookFormat

Url = Annotated[
    str,
    Field(
        min_length=1,
        max_length=2048,
        examples=["https://hooks.example.com/buildbay"],
        description="https:// (http:// only where the server allows it); not a private, "
        "loopback or link-local address; an IP address only as four decimal numbers",
    ),
]


Events = Annotated[
    list[SubscribableEvent],
    Field(
        min_length=1,
        max_length=len(SubscribableEvent),
        description="The event types to send (`webhook.test` is sent on request only)",
    ),
]
Description = Annotated[str, Field(max_length=500), Trimmed(blank_ok=True)]
Format = Annotated[
    WebhookFormat,
    Field(
        description="What is sent: `standard`, the signed Standard Webhooks event; or a chat "
        "message, unsigned: `slack` (Block Kit), `discord` (an embed), `teams` (an Adaptive "
        "Card through a Workflows webhook), `google-chat` (a cardsV2 card)"
    ),
]


class WebhookCreate(RequestModel):
    EXAMPLE: ClassVar[dict[str, Any] | None] = {
        "url": "https://ci.example.com/hooks/buildbay",
        "events": ["build.ready", "build.distributed"],
        "description": "Tell the release channel in chat",
    }

    url: Url
    events: Events
    description: Description = ""
    format: Format = WebhookFormat.STANDARD


class WebhookUpdate(RequestModel):
    EXAMPLE: ClassVar[dict[str, Any] | None] = {"events": ["build.ready"], "enabled": True}

    url: Url | None = None
    events: Events | None = None
    description: Description | None = None
    format: Format | None = None
    enabled: bool | None = Field(default=None, description="true enables a disabled endpoint")


class Webhook(ApiModel):
    id: str
    url: str
    events: list[str]
    description: str
    format: WebhookFormat
    suggested_format: WebhookFormat | None = Field(
        description="The chat format the URL looks like it needs (its host: hooks.slack.com, "
        "discord.com/api/webhooks, a Power Automate or webhook.office.com host, "
        "chat.googleapis.com), null if none"
    )
    enabled: bool
    disabled_reason: str | None = Field(description="Why it was disabled, while it is")
    created_at: Timestamp
    failing_since: Timestamp | None = Field(
        description="Since when every attempt failed (null after a success)"
    )
    last_delivery_at: Timestamp | None = Field(description="Its last attempt")


class WebhookCreated(Webhook):
    secret: str = Field(
        description="`whsec_...`: shown this once; it signs every `standard` message"
    )


class WebhookList(ApiModel):
    webhooks: list[Webhook]


class WebhookSecret(ApiModel):
    secret: str = Field(
        description="The new `whsec_...` secret; the previous one signs beside it for 24 hours"
    )


class DeliveryAccepted(ApiModel):
    delivery_id: str | None = Field(description="The delivery that will carry it")


class Delivery(ApiModel):
    id: str
    event_id: str = Field(description="The `webhook-id` header, the same on every attempt")
    event_type: str
    status: DeliveryStatus
    attempts: int
    next_attempt_at: Timestamp | None
    last_status_code: int | None
    last_error: str | None
    last_duration_ms: int | None
    created_at: Timestamp
    delivered_at: Timestamp | None


class DeliveryList(ApiModel):
    deliveries: list[Delivery]
    next_cursor: str | None


class Attempt(ApiModel):
    attempted_at: Timestamp
    status_code: int | None
    error: str | None
    duration_ms: int


class DeliveryDetail(Delivery):
    payload: dict[str, Any] = Field(description="The body sent, as JSON")
    last_response_body: str | None = Field(description="The first 1 KiB of the last answer")
    history: list[Attempt] = Field(description="Every attempt, oldest first")

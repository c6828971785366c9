"""A delivery's states, and the events an endpoint may subscribe to.

Free of SQLAlchemy: the models store them, the schemas name them (tests/test_layers.py).
"""

from __future__ import annotations

from enum import StrEnum


class DeliveryStatus(StrEnum):
    PENDING = "pending"  # its next attempt is due at `next_attempt_at`
    DELIVERED = "delivered"  # a 2xx answered an attempt
    FAILED = "failed"  # given up: the schedule ran out, or the endpoint was disabled


class SubscribableEvent(StrEnum):
    """What an endpoint may subscribe to: every EventType but `webhook.test`."""

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
    FEEDBACK_UPDATED = "feedback.updated"
    BUILD_FAILED = "build.failed"


class WebhookFormat(StrEnum):
    """What an endpoint is sent: the Standard Webhooks event (signed), or a chat message made
    from it (webhooks/chat.py), unsigned: chat receivers verify nothing."""

    STANDARD = "standard"
    SLACK = "slack"
    DISCORD = "discord"
    TEAMS = "teams"
    GOOGLE_CHAT = "google-chat"

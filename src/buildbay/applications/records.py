"""Applications as read (reads.py gives them): plain records, free of the database, which the
schemas present and the services take."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from buildbay.applications.enums import Platform, VersionPolicy
from buildbay.feedback.enums import FeedbackMode


@dataclass(frozen=True, slots=True)
class ApplicationRecord:
    id: str
    project_id: str
    name: str
    platform: Platform
    bundle_id: str | None
    retention_keep_last: int | None
    retention_keep_days: int | None
    retention_protect_groups: bool
    retention_protect_channels: bool
    update_key: str | None
    auto_distribute_groups: list[str]
    install_link_days: int
    created_at: datetime
    updated_at: datetime
    version_policy: VersionPolicy = VersionPolicy.WARN
    feedback_mode: FeedbackMode = FeedbackMode.TESTERS_ONLY


@dataclass(frozen=True, slots=True)
class ApplicationView:
    application: ApplicationRecord
    builds_count: int

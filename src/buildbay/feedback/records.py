"""Feedback as read and as written: plain records, free of the database, which the schemas
present and the services take."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from buildbay.applications.records import ApplicationRecord
from buildbay.builds.records import BuildRecord
from buildbay.feedback.enums import FeedbackCategory, FeedbackStatus


@dataclass(frozen=True, slots=True)
class FeedbackRecord:
    id: str
    project_id: str
    application_id: str
    build_id: str
    tester_id: str | None
    reporter_email: str
    category: FeedbackCategory
    text: str
    context: dict[str, Any] | None
    status: FeedbackStatus
    assignee_id: str | None
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class ScreenshotRecord:
    id: str
    feedback_id: str
    position: int
    storage_key: str
    content_type: str
    width: int
    height: int
    bytes: int


@dataclass(frozen=True, slots=True)
class TesterRecord:
    """The member who sent a feedback (None for a reporter named only by e-mail)."""

    id: str
    email: str


@dataclass(frozen=True, slots=True)
class ShownFeedback:
    """A feedback with what its JSON shows beside it: its screenshots, in order, and its tester."""

    feedback: FeedbackRecord
    screenshots: list[ScreenshotRecord]
    tester: TesterRecord | None


class SentBy(StrEnum):
    """How the sender of a feedback proved who they are (docs/feedback.md, "Who may send")."""

    MEMBER = "member"  # a signed-in member: a token, or the console's session
    INSTALL_LINK = "install-link"  # a personal install link's token: its person
    UPDATE_KEY = "update-key"  # the application's update key, with a reporter's e-mail


@dataclass(frozen=True, slots=True)
class Sender:
    """Who sends a feedback on which build, once allowed to: a member (`tester` set) whose
    e-mail is the reporter's, or an app holding the update key (`tester` None), whose
    reporter names themself in the form."""

    application: ApplicationRecord
    build: BuildRecord
    tester: TesterRecord | None
    via: SentBy

    @property
    def project_id(self) -> str:
        return self.application.project_id

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from buildbay.db.base import Base, EnumString
from buildbay.feedback.enums import FeedbackCategory, FeedbackStatus


class Feedback(Base):
    """What a tester (or, for an application open to anyone with its update key, a reporter
    named by e-mail) said about a build. Deleted with its build."""

    __tablename__ = "feedback"
    __table_args__ = (
        Index("ix_feedback_project_id_id", "project_id", "id"),
        Index("ix_feedback_application_id_id", "application_id", "id"),
        Index("ix_feedback_build_id_id", "build_id", "id"),
        # A tester's own feedback, newest first (migration 0033).
        Index("ix_feedback_tester_id_id", "tester_id", "id"),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    application_id: Mapped[str] = mapped_column(ForeignKey("applications.id", ondelete="CASCADE"))
    build_id: Mapped[str] = mapped_column(ForeignKey("builds.id", ondelete="CASCADE"))
    tester_id: Mapped[str | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    reporter_email: Mapped[str] = mapped_column(String(320))
    category: Mapped[FeedbackCategory] = mapped_column(EnumString(FeedbackCategory))
    text: Mapped[str] = mapped_column(Text)
    context: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    status: Mapped[FeedbackStatus] = mapped_column(
        EnumString(FeedbackStatus), default=FeedbackStatus.NEW
    )
    assignee_id: Mapped[str | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]


class FeedbackScreenshot(Base):
    """A screenshot of a feedback, re-encoded (no metadata survives), in the build storage."""

    __tablename__ = "feedback_screenshots"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    feedback_id: Mapped[str] = mapped_column(
        ForeignKey("feedback.id", ondelete="CASCADE"), index=True
    )
    position: Mapped[int] = mapped_column(Integer)
    storage_key: Mapped[str] = mapped_column(String(512), unique=True)
    content_type: Mapped[str] = mapped_column(String(40))
    width: Mapped[int] = mapped_column(Integer)
    height: Mapped[int] = mapped_column(Integer)
    bytes: Mapped[int] = mapped_column(BigInteger)


class FeedbackComment(Base):
    """The team's reply on a feedback, shown to (and mailed to) the tester who sent it."""

    __tablename__ = "feedback_comments"
    __table_args__ = (Index("ix_feedback_comments_feedback_id_id", "feedback_id", "id"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    feedback_id: Mapped[str] = mapped_column(ForeignKey("feedback.id", ondelete="CASCADE"))
    author_id: Mapped[str | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    text: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime]

from __future__ import annotations

from datetime import datetime

from sqlalchemy import JSON, Boolean, ForeignKey, Index, Integer, String, text, true
from sqlalchemy.orm import Mapped, mapped_column

from buildbay.applications.enums import Platform, VersionPolicy
from buildbay.db.base import Base, EnumString
from buildbay.feedback.enums import FeedbackMode


class Application(Base):
    __tablename__ = "applications"
    __table_args__ = (Index("ix_applications_project_id_id", "project_id", "id"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(100))
    platform: Mapped[Platform] = mapped_column(EnumString(Platform), default=Platform.OTHER)
    bundle_id: Mapped[str | None] = mapped_column(String(255))
    # Retention: the sweeper deletes ready builds beyond the newest N, or older than D days,
    # and never the newest ready build.
    retention_keep_last: Mapped[int | None] = mapped_column(Integer)
    retention_keep_days: Mapped[int | None] = mapped_column(Integer)
    # ... and, unless turned off, never the newest build distributed to each group, nor the
    # newest of each release channel (builds/retention.py).
    retention_protect_groups: Mapped[bool] = mapped_column(
        Boolean, default=True, server_default=true()
    )
    retention_protect_channels: Mapped[bool] = mapped_column(
        Boolean, default=True, server_default=true()
    )
    # The application's current update key (`bbu_...`, see UpdateKey), shown to developers.
    update_key: Mapped[str | None] = mapped_column(String(64))
    # The tester groups each build is distributed to once it is ready (distribution/), and how
    # long the install link in each tester's mail works.
    # (["everyone"] by default: an application made outside ApplicationService, as by a test's
    # fixture, behaves as one made through it.)
    auto_distribute_groups: Mapped[list[str]] = mapped_column(JSON, default=lambda: ["everyone"])
    install_link_days: Mapped[int] = mapped_column(Integer, server_default=text("14"))
    # What verify does with a version code that a ready build of other bytes already has.
    version_policy: Mapped[VersionPolicy] = mapped_column(
        EnumString(VersionPolicy), default=VersionPolicy.WARN, server_default=VersionPolicy.WARN
    )
    # Who may send feedback on its builds (feedback/enums.py); 32 long: `anyone-with-update-key`
    # is 22 (migration 0032).
    feedback_mode: Mapped[FeedbackMode] = mapped_column(
        EnumString(FeedbackMode, 32),
        default=FeedbackMode.TESTERS_ONLY,
        server_default=FeedbackMode.TESTERS_ONLY,
    )
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]


class UpdateKey(Base):
    """The keys an application's update check answers (updates/): its current one
    (`expires_at` null, also on `Application.update_key`) and, for a while after a rotation,
    the one before. Public by design (it ships inside apps and grants only the update check),
    so kept as is: the lookup is the primary key."""

    __tablename__ = "update_keys"

    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    application_id: Mapped[str] = mapped_column(
        ForeignKey("applications.id", ondelete="CASCADE"), index=True
    )
    created_at: Mapped[datetime]
    expires_at: Mapped[datetime | None]

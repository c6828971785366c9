from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from sqlalchemy import ForeignKey, Index, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from buildbay.db.base import Base, EnumString


class Platform(StrEnum):
    ANDROID = "android"
    IOS = "ios"
    MACOS = "macos"
    WINDOWS = "windows"
    LINUX = "linux"
    OTHER = "other"


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
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]

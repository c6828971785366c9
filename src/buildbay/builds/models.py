from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import JSON, BigInteger, ForeignKey, Index, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from buildbay.db.base import Base, EnumString


class BuildStatus(StrEnum):
    PENDING = "pending"  # upload link issued, not verified
    READY = "ready"  # bytes stored, checked and verified


class Build(Base):
    __tablename__ = "builds"
    __table_args__ = (
        Index("ix_builds_application_id_id", "application_id", "id"),
        Index("ix_builds_status_expires_at", "status", "expires_at"),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    application_id: Mapped[str] = mapped_column(ForeignKey("applications.id", ondelete="CASCADE"))
    file_name: Mapped[str] = mapped_column(String(255))
    file_size: Mapped[int] = mapped_column(BigInteger)
    expected_sha256: Mapped[str | None] = mapped_column(String(64))
    sha256: Mapped[str | None] = mapped_column(String(64))
    status: Mapped[BuildStatus] = mapped_column(
        EnumString(BuildStatus), default=BuildStatus.PENDING
    )
    notes: Mapped[str | None] = mapped_column(Text)
    storage_key: Mapped[str] = mapped_column(String(512), unique=True)
    # The object's version that verify checked, where the storage keeps versions (ObjectInfo).
    storage_version: Mapped[str | None] = mapped_column(String(1024))
    uploaded_by: Mapped[str | None] = mapped_column(
        ForeignKey("users.id", ondelete="SET NULL"), index=True
    )
    metadata_: Mapped[dict[str, Any] | None] = mapped_column("metadata", JSON)
    metadata_error: Mapped[str | None] = mapped_column(String(500))
    created_at: Mapped[datetime]
    expires_at: Mapped[datetime]
    verified_at: Mapped[datetime | None]

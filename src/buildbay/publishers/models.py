"""The CI identities an application trusts, and the ID tokens already exchanged."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import ForeignKey, Index, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from buildbay.db.base import Base


class TrustedPublisher(Base):
    """An application's trust in one CI identity: ID tokens of `issuer` whose `aud` is
    `audience` and whose `sub` matches `subject_pattern` (publishers/subjects.py) are exchanged
    for an upload-only token of the application. The token acts for `created_by` (the admin
    who added it), so it works while that account is a developer or more in the project."""

    __tablename__ = "trusted_publishers"
    __table_args__ = (
        Index("ix_trusted_publishers_application_id_id", "application_id", "id"),
        Index("ix_trusted_publishers_issuer", "issuer"),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    application_id: Mapped[str] = mapped_column(ForeignKey("applications.id", ondelete="CASCADE"))
    issuer: Mapped[str] = mapped_column(String(255))
    subject_pattern: Mapped[str] = mapped_column(String(500))
    audience: Mapped[str] = mapped_column(String(255))
    created_by: Mapped[str | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    created_at: Mapped[datetime]


class UsedIdToken(Base):
    """An ID token already exchanged, until it expires: the unique key refuses a second
    exchange of it, even one racing the first (the insert of one of them fails). `jti` is the
    token's own `jti`, or `sha256:` and the hash of the whole token when it has none."""

    __tablename__ = "used_id_tokens"
    __table_args__ = (
        UniqueConstraint("issuer", "jti", name="uq_used_id_tokens_issuer_jti"),
        Index("ix_used_id_tokens_expires_at", "expires_at"),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    issuer: Mapped[str] = mapped_column(String(255))
    jti: Mapped[str] = mapped_column(String(255))
    expires_at: Mapped[datetime]

"""One row per security-relevant change (audit/record.py), never changed and never deleted
through any API; the sweeper drops entries older than BUILDBAY_AUDIT_RETENTION_DAYS.

No foreign keys on purpose: an entry outlives the user, project or build it names (a project's
deletion is itself an entry), so the ids and names are copied in as they were at the time.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Index, String
from sqlalchemy.orm import Mapped, mapped_column

from buildbay.db.base import Base


class AuditEntry(Base):
    __tablename__ = "audit_entries"
    __table_args__ = (
        # Each listing is a keyset page newest first (ids are time-ordered) of one of these.
        Index("ix_audit_entries_project_id_id", "project_id", "id"),
        Index("ix_audit_entries_actor_id_id", "actor_id", "id"),
        Index("ix_audit_entries_subject_user_id_id", "subject_user_id", "id"),
        Index("ix_audit_entries_at", "at"),  # the sweeper's retention
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    at: Mapped[datetime]
    # "user" (actor_id and actor_email set), "operator" (a `buildbay` command on the server),
    # "ci" (a trusted publisher's token: actor_email names the CI identity) or "system".
    actor_kind: Mapped[str] = mapped_column(String(16))
    actor_id: Mapped[str | None] = mapped_column(String(32))
    actor_email: Mapped[str | None] = mapped_column(String(320))
    action: Mapped[str] = mapped_column(String(64))
    target_type: Mapped[str | None] = mapped_column(String(32))
    target_id: Mapped[str | None] = mapped_column(String(64))
    target_name: Mapped[str | None] = mapped_column(String(500))
    project_id: Mapped[str | None] = mapped_column(String(32))
    # The account whose own log (`/api/account/audit-log`) shows the entry besides the actor's:
    # whom a failed sign-in, a removal or a role change was about.
    subject_user_id: Mapped[str | None] = mapped_column(String(32))
    ip: Mapped[str | None] = mapped_column(String(64))
    user_agent: Mapped[str | None] = mapped_column(String(500))
    details: Mapped[dict[str, Any]] = mapped_column(JSON)

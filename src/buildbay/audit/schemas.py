"""The audit log as the API shows it: `{entries: [AuditEntry], nextCursor}`, each entry
`{id, at, actor, action, target, projectId, ip, userAgent, details}`."""

from __future__ import annotations

from typing import Any, Literal

from buildbay.audit.enums import AuditAction
from buildbay.schemas import ApiModel, Timestamp


class AuditActor(ApiModel):
    kind: Literal["user", "operator", "ci", "system"]
    id: str | None
    email: str | None


class AuditTarget(ApiModel):
    type: str
    id: str | None
    name: str | None


class AuditEntry(ApiModel):
    id: str
    at: Timestamp
    actor: AuditActor
    action: AuditAction
    target: AuditTarget | None
    project_id: str | None
    ip: str | None
    user_agent: str | None
    details: dict[str, Any]


class AuditLog(ApiModel):
    entries: list[AuditEntry]
    next_cursor: str | None


def entry_schema(row: dict[str, Any]) -> AuditEntry:
    """An entry from its row (audit/reads.py)."""
    target = None
    if row["target_type"] is not None:
        target = AuditTarget(type=row["target_type"], id=row["target_id"], name=row["target_name"])
    return AuditEntry(
        id=row["id"],
        at=row["at"],
        actor=AuditActor(kind=row["actor_kind"], id=row["actor_id"], email=row["actor_email"]),
        action=row["action"],
        target=target,
        project_id=row["project_id"],
        ip=row["ip"],
        user_agent=row["user_agent"],
        details=row["details"],
    )

"""Recording an audit entry: `record(db, ...)` adds it to the caller's unit of work, so the entry
commits with the change it tells of, or not at all.

Callers say who (`Actor`), from where (`Origin`: the request's address and user agent), what
(`AuditAction`) and to what (`Target`); `details` holds the facts of the change (a role from
and to, a webhook's URL host). Never a secret: no token, password, key or signed URL goes in.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.audit.models import AuditEntry
from buildbay.ids import new_id

_USER_AGENT_KEPT = 500  # the column's length
_NAME_KEPT = 500


class AuditAction(enum.StrEnum):
    SIGN_IN = "auth.sign_in"
    SIGN_IN_FAILED = "auth.sign_in_failed"
    PASSWORD_CHANGED = "auth.password_changed"
    PASSWORD_RESET = "auth.password_reset"
    TOKEN_CREATED = "auth.token_created"
    TOKEN_REVOKED = "auth.token_revoked"
    MEMBER_ADDED = "member.added"
    MEMBER_REMOVED = "member.removed"
    MEMBER_ROLE_CHANGED = "member.role_changed"
    INVITATION_SENT = "invitation.sent"
    INVITATION_ACCEPTED = "invitation.accepted"
    INVITATION_REVOKED = "invitation.revoked"
    PROJECT_CREATED = "project.created"
    PROJECT_RENAMED = "project.renamed"
    PROJECT_DELETED = "project.deleted"
    APPLICATION_CREATED = "application.created"
    APPLICATION_RENAMED = "application.renamed"
    APPLICATION_DELETED = "application.deleted"
    BUILD_UPLOADED = "build.uploaded"
    BUILD_DELETED = "build.deleted"
    INSTALL_LINK_CREATED = "install_link.created"
    INSTALL_LINK_REVOKED = "install_link.revoked"
    WEBHOOK_CREATED = "webhook.created"
    WEBHOOK_CHANGED = "webhook.changed"
    WEBHOOK_DELETED = "webhook.deleted"
    PLAN_CHANGED = "plan.changed"
    TRUSTED_PUBLISHER_ADDED = "trusted_publisher.added"
    TRUSTED_PUBLISHER_REMOVED = "trusted_publisher.removed"
    TRUSTED_PUBLISHER_EXCHANGED = "trusted_publisher.exchanged"
    SSO_GROUPS_CHANGED = "sso_groups.changed"


class ActorKind(enum.StrEnum):
    USER = "user"
    OPERATOR = "operator"  # a `buildbay` command run on the server
    CI = "ci"  # a trusted publisher's short-lived token
    SYSTEM = "system"  # the server itself (retention, an expiry)


@dataclass(frozen=True, slots=True)
class Actor:
    kind: ActorKind
    id: str | None = None
    email: str | None = None  # for CI: the identity (issuer and subject) the token was given for

    @classmethod
    def user(cls, user_id: str, email: str) -> Actor:
        return cls(ActorKind.USER, user_id, email)


OPERATOR = Actor(ActorKind.OPERATOR)
SYSTEM = Actor(ActorKind.SYSTEM)


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a change came from: the request's client address and user agent (None for a
    command on the server)."""

    ip: str | None = None
    user_agent: str | None = None


NO_ORIGIN = Origin()


@dataclass(frozen=True, slots=True)
class Target:
    type: str  # "user", "project", "application", "build", "token", "webhook", ...
    id: str | None
    name: str | None = None


def record(
    db: AsyncSession,
    *,
    at: datetime,
    actor: Actor,
    action: AuditAction,
    target: Target | None,
    origin: Origin,
    project_id: str | None = None,
    subject_user_id: str | None = None,
    details: dict[str, Any] | None = None,
) -> None:
    """Add the entry to `db`'s unit of work (committed, or rolled back, with the change)."""
    db.add(
        AuditEntry(
            id=new_id("aud"),
            at=at,
            actor_kind=actor.kind.value,
            actor_id=actor.id,
            actor_email=actor.email,
            action=action.value,
            target_type=target.type if target else None,
            target_id=target.id if target else None,
            target_name=target.name[:_NAME_KEPT] if target and target.name else None,
            project_id=project_id,
            subject_user_id=subject_user_id,
            ip=origin.ip,
            user_agent=origin.user_agent[:_USER_AGENT_KEPT] if origin.user_agent else None,
            details=details or {},
        )
    )

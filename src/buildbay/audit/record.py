"""Recording an audit entry: `record(db, ...)` adds it to the caller's unit of work, so the entry
commits with the change it tells of, or not at all.

Callers say who (`Actor`), from where (`Origin`: the request's address and user agent), what
(`AuditAction`) and to what (`Target`); `details` holds the facts of the change (a role from
and to, a webhook's URL host). Never a secret: no token, password, key or signed URL goes in.

The origin of a request's change is the request's own: `deps.request_session` attaches it to
the unit of work it creates (`attach_origin`), and `record` takes it from there unless told
another. A unit of work no request made (an operator command, the sweeper) has none: its
entries say no address. So every service that records needs only the actor passed down (from
the route's or the console's caller), never the request.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.audit.enums import ActorKind, AuditAction
from buildbay.audit.models import AuditEntry
from buildbay.ids import new_id
from buildbay.text import BIDI_CLASS, CONTROL_CLASS

__all__ = [
    "NO_ORIGIN", "OPERATOR", "SYSTEM", "Actor", "ActorKind", "AuditAction", "Origin", "Target",
    "actor_of", "attach_origin", "neutralised", "origin_of", "record",
]  # fmt: skip

_USER_AGENT_KEPT = 500  # the column's length
_NAME_KEPT = 500
_EMAIL_KEPT = 320
_IP_KEPT = 64
_ORIGIN_KEY = "buildbay.audit.origin"
# What a page, a log line or a terminal would act on rather than show: control characters
# (line breaks, escapes) and bidirectional controls become U+FFFD.
_UNSHOWABLE = re.compile(f"[{CONTROL_CLASS}{BIDI_CLASS}]")


class HasIdAndEmail(Protocol):
    @property
    def id(self) -> str: ...
    @property
    def email(self) -> str: ...


@dataclass(frozen=True, slots=True)
class Actor:
    kind: ActorKind
    id: str | None = None
    email: str | None = None  # for CI: the identity (issuer and subject) the token was given for

    @classmethod
    def user(cls, user_id: str, email: str) -> Actor:
        return cls(ActorKind.USER, user_id, email)

    @classmethod
    def of(cls, who: HasIdAndEmail) -> Actor:
        """The user `who` (a `UserRecord`, a `User`, a principal's user) as the actor."""
        return cls(ActorKind.USER, who.id, who.email)


class _HasUser(Protocol):
    @property
    def user(self) -> HasIdAndEmail: ...

    # A trusted publisher's exchanged token: the CI identity ("<issuer> <subject>") acting
    # for the publisher's creator (auth/authentication.py Principal); None for the rest.
    @property
    def ci_identity(self) -> str | None: ...


class _HasCaller(Protocol):
    @property
    def caller(self) -> _HasUser: ...


def actor_of(access: _HasCaller) -> Actor:
    """The caller of a project's or an application's access (projects/authorization.py): the
    user, or for a trusted publisher's token `Actor(CI, the creator's id, "<issuer> <subject>")`."""
    return actor_of_caller(access.caller)


def actor_of_caller(caller: _HasUser) -> Actor:
    """As `actor_of`, for a caller (an authenticated Principal) without a project's access."""
    if caller.ci_identity is not None:
        return Actor(ActorKind.CI, caller.user.id, caller.ci_identity[:_EMAIL_KEPT])
    return Actor.of(caller.user)


OPERATOR = Actor(ActorKind.OPERATOR)
SYSTEM = Actor(ActorKind.SYSTEM)


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a change came from: the request's client address and user agent (None for a
    command on the server)."""

    ip: str | None = None
    user_agent: str | None = None


NO_ORIGIN = Origin()


def neutralised(text: str | None, kept: int) -> str | None:
    """`text` as an entry keeps what a client sent (a user agent, an e-mail as typed): at most
    `kept` characters, control and bidirectional characters replaced by U+FFFD."""
    if text is None:
        return None
    return _UNSHOWABLE.sub("\ufffd", text[:kept])


def attach_origin(db: AsyncSession, ip: str | None, user_agent: str | None) -> None:
    """Say where the changes of the unit of work `db` come from (a request's client address
    and user agent); `record` writes it into each entry. Stored as sent; neutralised and cut
    only when an entry is written, so a request that records nothing pays nothing for it."""
    db.info[_ORIGIN_KEY] = Origin(ip, user_agent)


def origin_of(db: AsyncSession) -> Origin:
    """Where the changes of `db` come from: its request's (attach_origin), else nowhere."""
    origin: Origin = db.info.get(_ORIGIN_KEY, NO_ORIGIN)
    return origin


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
    origin: Origin | None = None,
    project_id: str | None = None,
    subject_user_id: str | None = None,
    details: dict[str, Any] | None = None,
) -> None:
    """Add the entry to `db`'s unit of work (committed, or rolled back, with the change).
    `origin`: where the change came from; None, the unit of work's own (`origin_of`)."""
    if origin is None:
        origin = origin_of(db)
    db.add(
        AuditEntry(
            id=new_id("aud"),
            at=at,
            actor_kind=actor.kind.value,
            actor_id=actor.id,
            actor_email=neutralised(actor.email, _EMAIL_KEPT),
            action=action.value,
            target_type=target.type if target else None,
            target_id=target.id if target else None,
            target_name=neutralised(target.name, _NAME_KEPT) if target else None,
            project_id=project_id,
            subject_user_id=subject_user_id,
            ip=neutralised(origin.ip, _IP_KEPT),
            user_agent=neutralised(origin.user_agent, _USER_AGENT_KEPT),
            details=details or {},
        )
    )

"""Who the audit log names for a request: the user, or the CI identity acting through a
trusted publisher's exchanged token (`Principal.ci_identity`, "<issuer> <subject>")."""

from __future__ import annotations

from buildbay.audit.record import Actor, ActorKind
from buildbay.auth.authentication import Principal

_EMAIL_KEPT = 320  # audit_entries.actor_email's length


def actor_of(principal: Principal) -> Actor:
    """`Actor(CI, user id of the publisher's creator, "<issuer> <subject>")` for a trusted
    publisher's token; the user otherwise."""
    if principal.ci_identity is not None:
        return Actor(ActorKind.CI, principal.user.id, principal.ci_identity[:_EMAIL_KEPT])
    return Actor.user(principal.user.id, principal.user.email)


def ci_identity(issuer: str, subject: str) -> str:
    return f"{issuer} {subject}"[:_EMAIL_KEPT]

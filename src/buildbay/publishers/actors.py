"""The CI identity a trusted publisher's exchanged token acts as ("<issuer> <subject>"), which
the audit log names as the actor of what the token does (audit/record.py `actor_of`)."""

from __future__ import annotations

_EMAIL_KEPT = 320  # audit_entries.actor_email's length


def ci_identity(issuer: str, subject: str) -> str:
    return f"{issuer} {subject}"[:_EMAIL_KEPT]

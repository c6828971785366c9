"""A user as a read gives it: the caller of every request (auth/service.py `Principal`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from buildbay.auth.models import User
from buildbay.config import Plan
from buildbay.db.reads import RecordOf


@dataclass(frozen=True, slots=True)
class UserRecord:
    """The users row, without the password's hash. Frozen: a change to a user is made on the
    `User` a unit of work loads, never on this copy (which a cache may share between
    requests)."""

    id: str
    email: str
    name: str
    plan: Plan
    created_at: datetime
    updated_at: datetime
    notify_new_builds: bool
    email_verified_at: datetime | None
    # As read with the credential that authenticated: that credential's epoch (auth/models.py).
    credentials_epoch: int

    @property
    def email_verified(self) -> bool:
        return self.email_verified_at is not None


USER = RecordOf(UserRecord, User)

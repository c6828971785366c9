"""Users and API tokens as reads give them: the caller of every request (auth/authentication.py
`Principal`), the account's own page and its list of tokens."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import bindparam, select

from buildbay.auth.enums import TokenScope
from buildbay.auth.models import ApiToken, EmailChange, User
from buildbay.config import Plan
from buildbay.db.reads import Reads, RecordOf


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
_USER_BY_ID = select(*USER.columns).where(User.id == bindparam("user_id"))


async def user_by_id(reads: Reads, user_id: str) -> UserRecord | None:
    """The users row as it is now (a caller's `Principal.user` may be a cached copy)."""
    row = await reads.first(_USER_BY_ID, {"user_id": user_id})
    return USER.of(row) if row is not None else None


@dataclass(frozen=True, slots=True)
class ApiTokenRecord:
    """An API token as its owner sees it listed: never its hash."""

    id: str
    name: str
    prefix: str
    created_at: datetime
    expires_at: datetime | None
    last_used_at: datetime | None
    scope: TokenScope | None
    project_ids: list[str] | None


API_TOKEN = RecordOf(ApiTokenRecord, ApiToken)
_API_TOKENS_OF = (
    select(*API_TOKEN.columns)
    # A trusted publisher's exchanged tokens act for the account that added the publisher,
    # but are the CI's: not listed among the account's own (publishers/).
    .where(ApiToken.user_id == bindparam("user_id"), ApiToken.publisher_id.is_(None))
    .order_by(ApiToken.id.desc())
)


async def api_tokens_of(reads: Reads, user_id: str) -> list[ApiTokenRecord]:
    """The user's API tokens, newest first."""
    return [API_TOKEN.of(row) for row in await reads.all(_API_TOKENS_OF, {"user_id": user_id})]


_PENDING_EMAIL = select(EmailChange.new_email).where(EmailChange.user_id == bindparam("user_id"))


async def pending_email_of(reads: Reads, user_id: str) -> str | None:
    """The address the user asked to move to, until its link is followed (auth/email_change.py)."""
    found = await reads.scalar(_PENDING_EMAIL, {"user_id": user_id})
    return str(found) if found is not None else None

"""The day's mail counters (`invitation_counts`), one key at a time, for mails other than
invitations that are capped: verification mails asked for again (auth/verification.py), a
public join link's confirmation mails (distribution/join_links.py). Invitations count theirs
in batches (invitations/caps.py). Kept apart from caps.py so that the sign-up side can count
without importing the projects' rules."""

from __future__ import annotations

import hashlib
import math
from datetime import UTC, datetime

from sqlalchemy import update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.invitations.models import InvitationCount


def address_hash(email: str) -> str:
    """How the counters and the block list name an address (normalised, as invitations'
    are): the table holds no address in clear."""
    return hashlib.sha256(email.encode()).hexdigest()


def day_of(now: datetime) -> int:
    """The UTC day the counters count in (its ordinal)."""
    return now.astimezone(UTC).date().toordinal()


def seconds_to_next_day(now: datetime) -> int:
    start = datetime.fromordinal(day_of(now) + 1).replace(tzinfo=UTC)
    return max(math.ceil((start - now).total_seconds()), 1)


async def spend_one(db: AsyncSession, now: datetime, key: str, cap: int) -> bool:
    """Count one more for `key` today, unless it has `cap` already: whether it was counted.
    One conditional UPDATE on a row made if missing: two requests at once cannot both take
    the last one (the row's lock, or SQLite's one writer, orders them)."""
    day = day_of(now)
    insert = sqlite.insert if db.get_bind().dialect.name == "sqlite" else postgresql.insert
    await db.execute(
        insert(InvitationCount).on_conflict_do_nothing(), [{"key": key, "day": day, "count": 0}]
    )
    spent = await db.execute(
        update(InvitationCount)
        .where(InvitationCount.key == key, InvitationCount.day == day, InvitationCount.count < cap)
        .values(count=InvitationCount.count + 1)
        .execution_options(synchronize_session=False)
    )
    return bool(spent.rowcount)  # type: ignore[attr-defined]

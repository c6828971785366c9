"""Update keys: what an app sends to the update check (buildbay.updates) to name its
application.

A key is public by design: it ships inside every copy of the app and grants nothing but the
update check of its application (never a build's page, list or file beyond what the check
offers). So it is kept as it is, not hashed: the console and the API show it again, and the
check finds it by primary key (`update_keys.key`), one indexed lookup. A rotation gives the
application a new key; the old one keeps answering for ROTATION_GRACE, so that installed copies
that still carry it keep finding their updates while a release with the new key rolls out.
"""

from __future__ import annotations

import secrets
from datetime import datetime, timedelta

from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.applications.models import Application, UpdateKey

UPDATE_KEY_PREFIX = "bbu_"
UPDATE_KEY_MAX = 64
ROTATION_GRACE = timedelta(days=7)


def new_update_key() -> str:
    return UPDATE_KEY_PREFIX + secrets.token_urlsafe(24)  # 192 random bits


def add_update_key(db: AsyncSession, application_id: str, now: datetime, key: str) -> str:
    """`key` as the application's current key (its row; the caller sets `update_key`)."""
    db.add(UpdateKey(key=key, application_id=application_id, created_at=now, expires_at=None))
    return key


async def rotate_update_key(db: AsyncSession, application_id: str, now: datetime) -> str:
    """A new key for the application; its keys before it answer until ROTATION_GRACE from now
    (those that already expire sooner keep their time)."""
    await db.execute(
        update(UpdateKey)
        .where(UpdateKey.application_id == application_id, UpdateKey.expires_at.is_(None))
        .values(expires_at=now + ROTATION_GRACE)
        .execution_options(synchronize_session=False)
    )
    key = add_update_key(db, application_id, now, new_update_key())
    await db.execute(
        update(Application)
        .where(Application.id == application_id)
        .values(update_key=key)
        .execution_options(synchronize_session=False)
    )
    await db.flush()
    return key

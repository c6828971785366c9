"""Removes pending builds whose upload link expired without a verify, with their bytes.

Safe to run in several processes at once: each candidate row is claimed by a conditional delete
(and, on PostgreSQL, locked with SKIP LOCKED so two sweepers never wait on each other). A ready
build is never touched.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from buildbay.builds.models import Build, BuildStatus
from buildbay.storage.base import Storage

log = logging.getLogger("buildbay.sweeper")

# An upload that started just before its link expired may still be streaming: give it time.
GRACE = timedelta(hours=1)
BATCH = 100


async def sweep_expired_uploads(
    sessions: async_sessionmaker[AsyncSession], storage: Storage, now: datetime
) -> int:
    swept = 0
    while True:
        async with sessions() as db, db.begin():
            rows = (
                await db.execute(
                    select(Build.id, Build.storage_key)
                    .where(Build.status == BuildStatus.PENDING, Build.expires_at < now - GRACE)
                    .order_by(Build.expires_at)
                    .limit(BATCH)
                    .with_for_update(skip_locked=True)
                )
            ).all()
            if not rows:
                return swept
            claimed = list(
                await db.scalars(
                    delete(Build)
                    .where(Build.id.in_([r.id for r in rows]), Build.status == BuildStatus.PENDING)
                    .returning(Build.storage_key)
                )
            )
        for key in claimed:  # after the commit: a crash here leaves only orphan bytes
            await storage.delete(key)
        swept += len(claimed)
        log.info("swept %d expired pending builds", len(claimed))
        if len(rows) < BATCH:
            return swept

"""The audit log's retention (BUILDBAY_AUDIT_RETENTION_DAYS): the sweeper deletes the entries
older than it, in bounded batches, each its own short transaction (a year of a busy server's
entries never becomes one long delete holding locks).

On PostgreSQL a trigger refuses any UPDATE or DELETE of an entry (migration 0044) unless the
transaction says it is this sweep (`SET LOCAL buildbay.audit_retention = 'on'`): no path of the
application can change or delete an entry by mistake. It guards against bugs and ad-hoc SQL,
not against the database's owner, who can drop the trigger.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from sqlalchemy import delete, select, text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from buildbay.audit.models import AuditEntry

log = logging.getLogger("buildbay.sweeper")

BATCH = 1000
RETENTION_SETTING = "buildbay.audit_retention"


async def allow_retention_delete(db: AsyncSession) -> None:
    """Tell PostgreSQL's trigger that this transaction is the retention sweep (no-op else)."""
    if db.get_bind().dialect.name == "postgresql":
        await db.execute(text(f"SET LOCAL {RETENTION_SETTING} = 'on'"))


async def sweep_audit_entries(
    sessions: async_sessionmaker[AsyncSession], now: datetime, keep_days: int
) -> int:
    """Delete the entries older than `keep_days` days, BATCH at a time, oldest first."""
    cutoff = now - timedelta(days=keep_days)
    swept = 0
    while True:
        async with sessions() as db, db.begin():
            await allow_retention_delete(db)
            ids = (
                await db.scalars(
                    select(AuditEntry.id)
                    .where(AuditEntry.at < cutoff)
                    .order_by(AuditEntry.at)
                    .limit(BATCH)
                )
            ).all()
            if ids:
                await db.execute(delete(AuditEntry).where(AuditEntry.id.in_(ids)))
        swept += len(ids)
        if len(ids) < BATCH:
            break
    if swept:
        log.info("audit log: deleted %d entries older than %d days", swept, keep_days)
    return swept

"""Writes that must hold under concurrency: row locks and inserts that may find their row there.

## Row locks

A rule checked by reading ("the project keeps another owner", "the build has no install link
yet") and then kept by writing holds only if no other transaction can change what was read in
between. `lock_row` makes the read that follows it see the latest committed state, and keeps it
so until the transaction ends:

- PostgreSQL: `SELECT ... FOR UPDATE` of the row. A second transaction locking the same row waits
  for the first to commit or roll back; at READ COMMITTED, each of its later statements then sees
  what the first committed.
- SQLite has no row locks (SQLAlchemy leaves FOR UPDATE out) but one writer at a time: a no-op
  `UPDATE` of the row takes the database's write lock, and the transaction keeps it until it
  ends. Everything the transaction reads after it is the latest state, since no one else can
  commit meanwhile.

## Inserting a row a concurrent request may insert too

A double-click sends the same insert twice at once; both requests find no row, and the second
insert breaks the unique constraint (a 500 on PostgreSQL, and its transaction unusable for the
error page that should follow). `insert_unless_present` inserts with ON CONFLICT DO NOTHING
instead: the second waits for the first to commit, inserts nothing, and says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import inspect, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import InstrumentedAttribute

from buildbay.db.base import Base
from buildbay.db.engine import LOCK_ONLY


async def lock_row(db: AsyncSession, key: InstrumentedAttribute[Any], value: Any) -> bool:
    """Lock the row of `key`'s table whose `key` is `value`; False if there is no such row."""
    if db.get_bind().dialect.name == "sqlite":
        result = await db.execute(
            update(key.class_)
            .where(key == value)
            .values({key.key: key})
            .execution_options(synchronize_session=False, **{LOCK_ONLY: True})
        )
        return bool(result.rowcount)  # type: ignore[attr-defined]
    found = await db.scalar(select(key).where(key == value).with_for_update())
    return found is not None


async def insert_unless_present(
    db: AsyncSession, model: type[Base], values: Mapping[str, Any]
) -> bool:
    """INSERT the row, unless one with the same primary key or unique value exists (or is being
    inserted by a transaction that then commits). True if this call inserted it."""
    insert = sqlite.insert if db.get_bind().dialect.name == "sqlite" else postgresql.insert
    result = await db.execute(
        insert(model)
        .values(dict(values))
        .on_conflict_do_nothing()
        .returning(*inspect(model).primary_key)
    )
    return result.first() is not None

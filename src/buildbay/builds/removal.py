"""Removing the stored files of a deleted application's or project's builds.

A delete commits the rows first, then removes the files: a crash in between leaves files that
no build owns (the sweeper removes them), never a build without its bytes. The files must not
come back after their removal: an upload that was finishing at the moment of the delete would
put its file in place under a prefix already removed. So the two are made exclusive:

- Before the rows go, the parent's row is locked (no build can be added to it until the commit)
  and the keys of its builds are read: the list is complete.
- After the commit, each key's file is deleted under that key's storage guard, the one an
  upload holds while it checks that its build still exists and puts its file in place. An
  upload either finished before (its file is deleted now) or checks after the commit (its
  build is gone: refused, nothing kept).
- Only then is the prefix removed, for whatever else is under it.

A presigned S3 PUT cannot be refused (the bucket does not ask us): what lands after the delete
is removed by the sweeper, as every stored object that no build owns.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import InstrumentedAttribute

from buildbay.builds.models import Build
from buildbay.db.concurrency import lock_row
from buildbay.storage.base import Storage


async def keys_of_builds_under(
    db: AsyncSession,
    parent: InstrumentedAttribute[str],
    builds_of: InstrumentedAttribute[str],
    parent_id: str,
) -> list[str]:
    """Lock the parent's row (`parent` is its key column; `builds_of` the builds' column that
    refers to it) and read the storage keys of every build under it."""
    await lock_row(db, parent, parent_id)
    return list(await db.scalars(select(Build.storage_key).where(builds_of == parent_id)))


async def remove_stored_files(storage: Storage, keys: list[str], prefix: str) -> None:
    """After the commit: each build's file under its guard, then whatever else is under
    `prefix`."""
    for key in keys:
        await storage.delete(key)
    await storage.delete_prefix(prefix)

"""The inline SQLite driver waits for another writer without blocking the event loop."""

from __future__ import annotations

import asyncio
from pathlib import Path

from sqlalchemy import text

from buildbay.db.engine import create_engine


async def test_a_second_writer_waits_for_the_first_without_blocking_the_loop(
    tmp_path: Path,
) -> None:
    engine = create_engine(f"sqlite+inline:///{tmp_path / 'locks.db'}")
    async with engine.begin() as conn:
        await conn.execute(text("CREATE TABLE t (n INTEGER)"))

    first_holds_lock = asyncio.Event()
    ticks = 0

    async def first() -> None:
        async with engine.begin() as conn:
            await conn.execute(text("INSERT INTO t VALUES (1)"))
            first_holds_lock.set()
            await asyncio.sleep(0.2)  # holds the write lock while the loop serves others

    async def second() -> None:
        await first_holds_lock.wait()
        async with engine.begin() as conn:
            await conn.execute(text("INSERT INTO t VALUES (2)"))

    async def heartbeat() -> None:
        nonlocal ticks
        while not done.is_set():
            ticks += 1
            await asyncio.sleep(0.01)

    done = asyncio.Event()
    beat = asyncio.create_task(heartbeat())
    await asyncio.gather(first(), second())
    done.set()
    await beat

    async with engine.connect() as conn:
        rows = (await conn.execute(text("SELECT n FROM t ORDER BY n"))).scalars().all()
    await engine.dispose()
    assert rows == [1, 2]
    assert ticks >= 10  # the loop kept running while the second writer waited

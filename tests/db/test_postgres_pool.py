"""The PostgreSQL pool: a connection is pinged before use only after it sat idle (one the server
closed meanwhile is replaced unseen, and a busy pool pays no round trip per check-out), and a
burst of requests past the pool's size waits for its connections instead of opening new ones."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import asyncpg
import pytest
from sqlalchemy import literal, select, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from buildbay.app import create_app
from buildbay.config import Settings
from buildbay.db.engine import create_engine, create_engines, create_sessionmaker, finish
from buildbay.db.reads import Reads
from buildbay.jobs.models import Job
from buildbay.jobs.queue import new_job
from tests.conftest import PG_URL

pytestmark = [
    pytest.mark.skipif(not PG_URL, reason="pinging is PostgreSQL's (SQLite is a file)"),
    # The engines here are made from PG_URL directly: its worker's database must exist first
    # (made by the session's migration when it runs before any of these).
    pytest.mark.usefixtures("migrated_database"),
]
IDLE = 0.2
POOL = 3


@pytest.fixture
async def engines() -> AsyncIterator[Callable[[float], AsyncEngine]]:
    made: list[AsyncEngine] = []

    def make(ping_after_idle: float) -> AsyncEngine:
        assert PG_URL is not None
        engine = create_engine(PG_URL, ping_after_idle=ping_after_idle, pool_size=POOL)
        made.append(engine)
        return engine

    yield make
    for engine in made:
        await engine.dispose()


def count_pings(engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch) -> list[None]:
    dialect = engine.sync_engine.dialect
    pings: list[None] = []
    real = dialect.do_ping

    def counting(dbapi_connection: Any) -> bool:
        pings.append(None)
        return real(dbapi_connection)

    monkeypatch.setattr(dialect, "do_ping", counting)
    return pings


async def backend_pid(engine: AsyncEngine) -> int:
    async with engine.connect() as connection:
        return int((await connection.execute(text("SELECT pg_backend_pid()"))).scalar_one())


async def terminate(pid: int) -> None:
    assert PG_URL is not None
    admin = await asyncpg.connect(PG_URL.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        assert await admin.fetchval("SELECT pg_terminate_backend($1)", pid)
    finally:
        await admin.close()


async def test_a_connection_closed_while_idle_is_replaced_before_use(
    engines: Callable[[float], AsyncEngine], monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = engines(IDLE)
    pings = count_pings(engine, monkeypatch)
    first = await backend_pid(engine)
    await terminate(first)  # as a database restart or an idle timeout would
    await asyncio.sleep(IDLE * 1.5)

    second = await backend_pid(engine)

    assert second != first
    assert len(pings) == 1


async def test_a_connection_in_steady_use_is_not_pinged(
    engines: Callable[[float], AsyncEngine], monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = engines(60)
    pings = count_pings(engine, monkeypatch)

    pids = {await backend_pid(engine) for _ in range(20)}

    assert len(pids) == 1  # one pooled connection, used 20 times in turn
    assert pings == []


async def test_without_the_ping_one_request_pays_and_the_pool_recovers(
    engines: Callable[[float], AsyncEngine],
) -> None:
    # The trade made for busy servers: a connection closed within the idle time of its last
    # use fails once, as a disconnect, and the pool drops it.
    engine = engines(60)
    await terminate(await backend_pid(engine))

    with pytest.raises(DBAPIError) as failed:
        await backend_pid(engine)

    assert failed.value.connection_invalidated
    assert await backend_pid(engine) > 0


async def test_a_burst_past_the_pool_size_reuses_the_pools_connections(
    engines: Callable[[float], AsyncEngine],
) -> None:
    # With overflow, each connection past the pool's size was closed as it came back, and a
    # steady burst opened and closed a server process per request.
    engine = engines(60)

    async def one_request() -> int:
        async with engine.connect() as connection:
            await asyncio.sleep(0.01)  # held a moment, as a request's query is
            return int((await connection.execute(text("SELECT pg_backend_pid()"))).scalar_one())

    pids: set[int] = set()
    for _ in range(3):
        pids.update(await asyncio.gather(*(one_request() for _ in range(4 * POOL))))
    assert len(pids) <= POOL  # the same connections, burst after burst
    assert engine.sync_engine.pool.checkedin() == POOL  # type: ignore[attr-defined]


async def _client_sessions(url: str) -> set[int]:
    """The server processes of the clients connected to `url`'s database, but the asker's."""
    admin = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        rows = await admin.fetch(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
            " AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
        )
        return {int(row["pid"]) for row in rows}
    finally:
        await admin.close()


async def _until(check: Callable[[], Awaitable[bool]]) -> None:
    """Poll `check` for up to 5 s: a server process ends a moment after its client hangs up."""
    for _ in range(100):
        if await check():
            return
        await asyncio.sleep(0.05)


async def test_read_only_requests_have_a_pool_of_their_own_which_closes_with_the_app(
    settings: Settings,
) -> None:
    """Reads run on a pool of their own, opened in autocommit (db/engine.py `create_engines`;
    tests/db/test_request_transactions.py shows what autocommit reads see), apart from the
    units of work's; `AppContext.dispose` closes both, so no connection outlives the app."""
    assert PG_URL is not None
    ctx = create_app(settings, migrate_on_start=False).state.ctx
    try:
        assert ctx.read_engine.pool is not ctx.engine.pool
        before = await _client_sessions(PG_URL)
        reads = Reads.on(ctx.read_engine)
        try:
            assert await reads.scalar(select(literal(1))) == 1
        finally:
            await reads.close()
        async with ctx.sessions() as db, db.begin():
            await db.execute(text("SELECT 1"))
        opened = await _client_sessions(PG_URL) - before
        assert len(opened) == 2  # one in each pool, kept for reuse
    finally:
        await ctx.dispose()

    async def closed() -> bool:
        return not opened & await _client_sessions(PG_URL)

    await _until(closed)
    assert await closed()


async def test_both_pools_are_built_from_the_same_arguments() -> None:
    # Such as asyncpg's statement cache turned off behind PgBouncer in transaction mode: an
    # argument that reached only one pool would break the other's every query there.
    assert PG_URL is not None
    server_settings = {"application_name": "buildbay-both-pools"}
    engine, reads = create_engines(PG_URL, connect_args={"server_settings": server_settings})
    try:
        for each in (engine, reads):
            async with each.connect() as connection:
                name = await connection.scalar(text("SHOW application_name"))
            assert name == "buildbay-both-pools"
    finally:
        await engine.dispose()
        await reads.dispose()


async def test_read_only_requests_get_a_busy_pools_connections_in_the_order_they_asked() -> None:
    """The pool's own wait let a request that asked just as a connection came back take it,
    ahead of those already waiting, and sent the one it woke to the back of the line: with
    every connection busy, some requests waited dozens of times the median. Reads on the reads'
    engine wait in turn (db/turns.py)."""
    assert PG_URL is not None
    engine, reads_engine = create_engines(PG_URL, pool_size=1)
    served: list[str] = []

    async def read(name: str) -> None:
        reads = Reads.on(reads_engine)
        try:
            assert await reads.scalar(select(literal(1))) == 1
            served.append(name)
        finally:
            await reads.close()

    try:
        holder = Reads.on(reads_engine)
        await holder.scalar(select(literal(1)))  # the pool's one connection
        waiting = [asyncio.create_task(read(f"waiting {n}")) for n in range(3)]
        await asyncio.sleep(0.05)  # all three wait, in this order
        # A newcomer asks at the very moment the connection comes back.
        await asyncio.gather(holder.close(), read("newcomer"))
        await asyncio.gather(*waiting)
        assert served == ["waiting 0", "waiting 1", "waiting 2", "newcomer"]
    finally:
        await engine.dispose()
        await reads_engine.dispose()


@contextlib.asynccontextmanager
async def units_of_work(**pool: Any) -> AsyncIterator[async_sessionmaker[AsyncSession]]:
    """Units of work on PG_URL, through engines made with `pool` (its size, its timeout, ...),
    disposed of afterwards."""
    assert PG_URL is not None
    engine, reads_engine = create_engines(PG_URL, **pool)
    try:
        yield create_sessionmaker(engine)
    finally:
        await engine.dispose()
        await reads_engine.dispose()


async def test_units_of_work_get_a_busy_pools_connections_in_the_order_they_asked() -> None:
    """As the reads: a unit of work that asked just as a connection came back took it ahead of
    those waiting (50 writers on a pool of 10 waited 3.5-4.8 s at p99, against 81-113 ms at p50:
    bench/writes.py). Units of work wait in turn too (db/engine.py `UnitOfWorkSession`)."""
    served: list[str] = []

    async def write(name: str) -> None:
        db = sessions()
        ok = False
        try:
            assert await db.scalar(select(literal(1))) == 1
            served.append(name)
            ok = True
        finally:
            await finish(db, ok=ok)

    async with units_of_work(pool_size=1) as sessions:
        holder = sessions()
        await holder.scalar(select(literal(1)))  # the pool's one connection
        waiting = [asyncio.create_task(write(f"waiting {n}")) for n in range(3)]
        await asyncio.sleep(0.05)  # all three wait, in this order
        # The holder's task asks again as soon as its connection is back, before the waiter
        # that woke has run (the pool's queue let it go first).
        await finish(holder, ok=True)
        await write("newcomer")
        await asyncio.gather(*waiting)
        assert served == ["waiting 0", "waiting 1", "waiting 2", "newcomer"]


async def test_a_unit_of_work_gives_its_turn_back_however_it_ends() -> None:
    """Committed, rolled back, failed on a statement, closed by `async with`, or never used: the
    pool's one connection is free for the next unit of work at once. A place kept by one of them
    would leave the last to wait out the pool's timeout, and be refused."""
    one = select(literal(1))
    async with units_of_work(pool_size=1, pool_timeout=0.5) as sessions:
        async with asyncio.timeout(10):
            for ok in (True, False):
                db = sessions()
                await db.execute(one)
                await finish(db, ok=ok)
            db = sessions()
            with pytest.raises(DBAPIError):
                await db.execute(text("SELECT no_such_column"))
            await finish(db, ok=False)
            async with sessions() as db:
                await db.execute(one)
            await finish(sessions(), ok=True)

            db = sessions()
            assert await db.scalar(one) == 1
            await finish(db, ok=True)


async def test_a_unit_of_work_dropped_unclosed_gives_its_place_back_when_collected() -> None:
    """A session nobody closed (a bug, but one the pool forgives: its connection goes back when
    the session is collected) must not keep its place for good, or every later unit of work
    would wait out the pool's timeout."""
    one = select(literal(1))
    async with units_of_work(pool_size=1, pool_timeout=0.5) as sessions:
        dropped = sessions()
        await dropped.execute(one)
        del dropped
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # SQLAlchemy's, about the connection it collects
            gc.collect()
        await asyncio.sleep(0)  # the place comes back on the loop
        db = sessions()
        async with asyncio.timeout(10):
            assert await db.scalar(one) == 1
        await finish(db, ok=True)


async def test_a_unit_of_work_holding_a_connection_without_a_place_does_not_wait_for_one() -> None:
    """`begin_nested()` flushes what was added before it takes a place (it cannot wait): the
    session then holds a connection without one. Waiting for a place then, while another unit
    of work holds the place and waits for that connection, would stall both until the pool's
    timeout; the session goes on as the pool alone would have let it."""
    one = select(literal(1))
    async with units_of_work(pool_size=1, pool_timeout=2) as sessions:
        first = sessions()
        first.add(Job(**new_job("nothing", {}, datetime.now(UTC))))
        async with asyncio.timeout(10):
            async with first.begin_nested():  # flushes the job: the pool's one connection
                other = sessions()
                waiting = asyncio.create_task(other.scalar(one))  # takes the place, waits
                await asyncio.sleep(0.05)
                assert await first.scalar(one) == 1
            await finish(first, ok=False)
            assert await waiting == 1
            await finish(other, ok=True)


async def test_a_read_waiting_in_turn_past_the_pools_timeout_is_refused_as_the_pool_refuses() -> (
    None
):
    """Waiting in turn is bounded as the pool's own wait was: past `pool_timeout`, the pool's
    error (answered 503 with Retry-After), not a wait without end behind a stuck connection."""
    assert PG_URL is not None
    engine, reads_engine = create_engines(PG_URL, pool_size=1, pool_timeout=0.2)
    holder = Reads.on(reads_engine)
    try:
        await holder.scalar(select(literal(1)))  # the pool's one connection, kept
        late = Reads.on(reads_engine)
        async with asyncio.timeout(10):  # without the bound: waits for good
            with pytest.raises(PoolTimeoutError):
                await late.scalar(select(literal(1)))
        await late.close()
    finally:
        await holder.close()
        await engine.dispose()
        await reads_engine.dispose()

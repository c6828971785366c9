"""The request's sessions: a unit of work commits before the response and an error rolls it back;
reads run SELECTs only and answer values that cannot be changed; every route of the API runs in
a TransactionRoute, and the routes that only read declare it."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from fastapi import APIRouter, FastAPI
from fastapi.routing import APIRoute
from sqlalchemy import delete, event, insert, select, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

import buildbay
from buildbay.db.engine import (
    after_commit,
    connection_released,
    finish,
    hold_until_ended,
    insert_pair,
)
from buildbay.db.reads import Reads
from buildbay.deps import SessionDep, TransactionRoute
from buildbay.errors import Conflict
from buildbay.projects.models import Project
from buildbay.projects.reads import PROJECT
from tests.conftest import Account, Api, assert_problem

NOW = datetime(2026, 11, 22, 4, 19, 53, tzinfo=UTC)


@pytest.fixture
def sessions(app: FastAPI) -> async_sessionmaker[AsyncSession]:
    factory: async_sessionmaker[AsyncSession] = app.state.ctx.sessions
    return factory


@pytest.fixture
def commits(sessions: async_sessionmaker[AsyncSession]) -> Iterator[list[object]]:
    """Every commit of a session from `sessions`, as it happens."""
    seen: list[object] = []
    sync_class = sessions.kw["sync_session_class"]
    listener: Callable[[object], None] = seen.append
    event.listen(sync_class, "after_commit", listener)
    yield seen
    event.remove(sync_class, "after_commit", listener)


def _project(project_id: str) -> Project:
    return Project(id=project_id, name=project_id, created_at=NOW, updated_at=NOW)


async def _project_names(sessions: async_sessionmaker[AsyncSession]) -> list[str]:
    async with sessions() as db:
        return list(await db.scalars(select(Project.name).order_by(Project.name)))


@pytest.fixture
def read_engine(app: FastAPI) -> AsyncEngine:
    engine: AsyncEngine = app.state.ctx.read_engine
    return engine


async def test_reads_refuse_anything_but_a_select(
    read_engine: AsyncEngine, sessions: async_sessionmaker[AsyncSession]
) -> None:
    async with sessions() as db:
        db.add(_project("p"))
        await db.commit()
    reads = Reads.on(read_engine)
    try:
        for statement in (
            insert(Project).values(id="q", name="q", created_at=NOW, updated_at=NOW),
            delete(Project),
            text("DELETE FROM projects"),
        ):
            with pytest.raises(TypeError, match="only run SELECT"):
                await reads.scalar(statement)  # type: ignore[arg-type]
    finally:
        await reads.close()
    assert await _project_names(sessions) == ["p"]


async def test_what_reads_answer_cannot_be_changed_and_so_never_silently_lost(
    read_engine: AsyncEngine, sessions: async_sessionmaker[AsyncSession]
) -> None:
    async with sessions() as db:
        db.add(_project("p"))
        await db.commit()
    reads = Reads.on(read_engine)
    try:
        row = await reads.first(select(*PROJECT.columns))
    finally:
        await reads.close()
    assert row is not None
    project = PROJECT.of(row)
    with pytest.raises(AttributeError):
        project.name = "renamed"  # type: ignore[misc]
    assert await _project_names(sessions) == ["p"]


async def test_reads_see_what_committed_after_they_began(
    read_engine: AsyncEngine, sessions: async_sessionmaker[AsyncSession]
) -> None:
    """Autocommit on PostgreSQL: each statement reads the database as it is now, not a
    snapshot taken at the first."""
    reads = Reads.on(read_engine)
    try:
        assert await reads.all(select(Project.name)) == []
        async with sessions() as db:
            db.add(_project("later"))
            await db.commit()
        assert [row["name"] for row in await reads.all(select(Project.name))] == ["later"]
    finally:
        await reads.close()


async def test_a_unit_of_work_that_never_ran_a_statement_commits_nothing(
    sessions: async_sessionmaker[AsyncSession], commits: list[object]
) -> None:
    await finish(sessions(), ok=True)
    assert commits == []


@pytest.mark.parametrize(
    "write",
    [
        pytest.param(lambda db: db.add(_project("p-orm")), id="unit of work"),
        pytest.param(
            lambda db: db.execute(
                insert(Project).values(id="p-core", name="p-core", created_at=NOW, updated_at=NOW)
            ),
            id="core insert",
        ),
    ],
)
async def test_a_session_that_wrote_commits(
    sessions: async_sessionmaker[AsyncSession],
    commits: list[object],
    write: Callable[[AsyncSession], object],
) -> None:
    session = sessions()
    pending = write(session)
    if hasattr(pending, "__await__"):
        await pending  # type: ignore[misc]
    await finish(session, ok=True)
    assert len(commits) == 1
    assert len(await _project_names(sessions)) == 1


async def test_a_failed_unit_of_work_is_rolled_back(
    sessions: async_sessionmaker[AsyncSession], commits: list[object]
) -> None:
    session = sessions()
    session.add(_project("p"))
    await session.flush()
    await finish(session, ok=False)
    assert commits == []
    assert await _project_names(sessions) == []


async def test_a_commit_that_fails_raises_and_keeps_nothing(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    async with sessions() as db:
        db.add(_project("taken"))
        await db.commit()
    session = sessions()
    session.add(_project("taken"))  # the primary key exists: the flush at commit fails
    with pytest.raises(IntegrityError):
        await finish(session, ok=True)
    assert await _project_names(sessions) == ["taken"]


@pytest.fixture
def probe_routes(app: FastAPI) -> None:
    """Two routes that write a project, one of which then fails."""
    router = APIRouter(route_class=TransactionRoute)

    @router.post("/probe/write/{name}")
    async def write(name: str, db: SessionDep) -> dict[str, str]:
        db.add(_project(name))
        return {"name": name}

    @router.post("/probe/write-then-fail/{name}")
    async def write_then_fail(name: str, db: SessionDep) -> dict[str, str]:
        db.add(_project(name))
        await db.flush()
        raise Conflict("the probe fails after writing")

    app.include_router(router)


@pytest.mark.usefixtures("probe_routes")
async def test_a_route_commits_before_answering_and_rolls_back_on_error(
    client: httpx.AsyncClient, sessions: async_sessionmaker[AsyncSession]
) -> None:
    assert (await client.post("/probe/write/kept")).status_code == 200
    assert await _project_names(sessions) == ["kept"]

    assert_problem(await client.post("/probe/write-then-fail/lost"), 409, "conflict")
    assert await _project_names(sessions) == ["kept"]


def test_every_route_of_the_api_is_a_transaction_route(app: FastAPI) -> None:
    routes = [
        route
        for route in app.routes
        if isinstance(route, APIRoute)
        and route.path.startswith(("/api/", "/storage/", "/healthz", "/readyz"))
    ]
    assert len(routes) > 20
    plain = [r for r in routes if not isinstance(r, TransactionRoute)]
    assert plain == []


async def test_a_session_outside_a_transaction_route_is_refused(app: FastAPI) -> None:
    probe = FastAPI()

    @probe.get("/plain")
    async def plain(db: SessionDep) -> dict[str, str]:
        return {}

    probe.state.ctx = app.state.ctx
    transport = httpx.ASGITransport(app=probe, raise_app_exceptions=True)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
        with pytest.raises(RuntimeError, match="a session needs a TransactionRoute"):
            await c.get("/plain")


async def test_what_a_unit_of_work_holds_is_let_go_after_its_commit(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """`hold_until_ended`: a guard (here a lock) taken inside a unit of work is held until the
    commit is over, whatever the service did after taking it."""
    lock = asyncio.Lock()
    seen: list[str] = []

    @event.listens_for(sessions.kw["sync_session_class"], "after_commit", once=True)
    def _committed(_session: object) -> None:
        seen.append(f"committed, locked={lock.locked()}")

    session = sessions()
    await hold_until_ended(session, lock)
    session.add(_project("guarded"))
    assert lock.locked()
    await finish(session, ok=True)
    assert seen == ["committed, locked=True"]
    assert not lock.locked()


async def test_what_a_unit_of_work_holds_is_let_go_after_a_rollback(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    lock = asyncio.Lock()
    session = sessions()
    await hold_until_ended(session, lock)
    session.add(_project("dropped"))
    await finish(session, ok=False)
    assert not lock.locked()
    assert await _project_names(sessions) == []


async def test_a_unit_of_work_that_wrote_nothing_gives_its_connection_back_for_a_long_wait(
    app: FastAPI, sessions: async_sessionmaker[AsyncSession]
) -> None:
    """`connection_released` (a verify reading its file): the connection is back in the pool
    during the wait, what `hold_until_ended` took stays held, and the unit of work reads and
    writes after it, on a connection taken again."""
    engine: AsyncEngine = app.state.ctx.engine
    lock = asyncio.Lock()
    session = sessions()
    await hold_until_ended(session, lock)
    reads = Reads.within(session)
    assert await reads.all(select(Project.id)) == []
    assert engine.pool.checkedout() == 1

    async with connection_released(session):
        assert engine.pool.checkedout() == 0
        assert lock.locked()
        async with sessions() as other, other.begin():  # what another request writes meanwhile
            other.add(_project("prj_meanwhile"))

    assert [row["id"] for row in await reads.all(select(Project.id))] == ["prj_meanwhile"]
    session.add(_project("prj_after"))
    await finish(session, ok=True)
    assert not lock.locked()
    assert engine.pool.checkedout() == 0
    assert await _project_names(sessions) == ["prj_after", "prj_meanwhile"]


async def _wrote_a_row(session: AsyncSession) -> None:
    await session.execute(
        insert(Project).values(id="prj_x", name="x", created_at=NOW, updated_at=NOW)
    )


async def _flushed_a_row(session: AsyncSession) -> None:
    session.add(_project("prj_x"))
    await session.flush()


async def _added_a_row(session: AsyncSession) -> None:
    session.add(_project("prj_x"))


async def _wrote_a_pair(session: AsyncSession) -> None:
    project = {"id": "prj_x", "name": "x", "created_at": NOW, "updated_at": NOW}
    other = {**project, "id": "prj_y", "name": "y"}
    await insert_pair(session, (Project.__table__, project), (Project.__table__, other))


async def _waits_for_a_commit(session: AsyncSession) -> None:
    await session.scalar(select(Project.id))
    after_commit(session, _noting([], _told))


@pytest.mark.parametrize(
    ("wrote", "names"),
    [
        (_wrote_a_row, ["x"]),
        (_flushed_a_row, ["prj_x"]),
        (_added_a_row, ["prj_x"]),
        (_wrote_a_pair, ["x", "y"]),
        (_waits_for_a_commit, []),
    ],
)
async def test_a_unit_of_work_that_wrote_keeps_its_connection_and_its_writes(
    sessions: async_sessionmaker[AsyncSession],
    wrote: Callable[[AsyncSession], Awaitable[None]],
    names: list[str],
) -> None:
    """Giving the connection back ends the transaction: after a write (an INSERT, a flush, an
    object added, a row written on the connection, an action waiting for the commit) it is
    refused, and what was written still commits."""
    session = sessions()
    await wrote(session)
    with pytest.raises(RuntimeError, match="a unit of work that wrote"):
        async with connection_released(session):
            pass
    await finish(session, ok=True)
    assert await _project_names(sessions) == names


def _noting(done: list[str], what: Callable[[], Awaitable[str]]) -> Callable[[], Awaitable[None]]:
    """An after-commit action that appends what `what` says to `done`."""

    async def note() -> None:
        done.append(await what())

    return note


async def _told() -> str:
    return "told"


async def test_after_commit_actions_run_once_the_transaction_committed(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    done: list[str] = []

    async def projects_now() -> str:
        return f"told; projects now {await _project_names(sessions)}"

    note = _noting(done, projects_now)
    session = sessions()
    session.add(_project("prj_told"))
    after_commit(session, note)
    assert done == []
    await finish(session, ok=True)

    assert done == ["told; projects now ['prj_told']"]


async def test_after_commit_actions_are_dropped_with_a_rollback(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    done: list[str] = []
    note = _noting(done, _told)
    session = sessions()
    session.add(_project("prj_dropped"))
    after_commit(session, note)
    await finish(session, ok=False)

    assert done == []
    assert await _project_names(sessions) == []


async def test_after_commit_actions_of_a_commit_made_before_an_error_still_run(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    # A reused refresh token: the revocation commits, then the request fails.
    done: list[str] = []
    note = _noting(done, _told)
    session = sessions()
    session.add(_project("prj_kept"))
    after_commit(session, note)
    await session.commit()
    session.add(_project("prj_undone"))
    await finish(session, ok=False)

    assert done == ["told"]
    assert await _project_names(sessions) == ["prj_kept"]


def test_work_after_a_commit_is_told_to_one_mechanism() -> None:
    """`after_commit` (db/engine.py) is the only way to act once a unit of work commits: its
    actions run once, before the response, and are dropped with a rollback. A listener of a
    session's own would be a second way, with rules of its own."""
    source = Path(buildbay.__file__).parent
    engine = source / "db" / "engine.py"
    listening = [
        str(path.relative_to(source))
        for path in sorted(source.rglob("*.py"))
        if path != engine and re.search(r"""["']after_(commit|rollback)["']""", path.read_text())
    ]
    assert listening == []


async def test_the_api_reads_clients_poll_open_no_unit_of_work(
    app: FastAPI, client: httpx.AsyncClient, api: Api, owner: Account
) -> None:
    """The GET routes declare read-only access: they read through their reads alone and never
    start a unit of work (a transaction, on PostgreSQL a BEGIN and a ROLLBACK)."""
    project = await api.project(owner)
    application = await api.application(owner, project["id"])
    build = await api.upload(owner, project["id"], application["id"])
    builds = f"/api/app-distribution/{project['id']}/{application['id']}/builds"
    ctx = app.state.ctx
    opened: list[str] = []
    real_sessions = ctx.sessions

    def counting(kind: str, factory: async_sessionmaker[AsyncSession]) -> object:
        def make() -> AsyncSession:
            opened.append(kind)
            return factory()

        return make

    def checked_out(*_: object) -> None:
        opened.append("read")

    ctx.sessions = counting("unit of work", real_sessions)
    event.listen(ctx.read_engine.sync_engine, "checkout", checked_out)
    try:
        for path in (
            "/api/projects",
            f"/api/projects/{project['id']}",
            f"/api/projects/{project['id']}/members",
            f"/api/projects/{project['id']}/applications",
            f"/api/projects/{project['id']}/applications/{application['id']}",
            builds,
            f"{builds}/latest",
            f"{builds}/{build['buildId']}",
            f"{builds}/{build['buildId']}/install-links",
            "/api/auth/me",
            "/api/account/api-tokens",
        ):
            r = await client.get(path, headers=owner.headers)
            assert r.status_code == 200, (path, r.text)
        event.remove(ctx.read_engine.sync_engine, "checkout", checked_out)
        r = await client.post("/api/projects", json={"name": "Written"}, headers=owner.headers)
        assert r.status_code == 201, r.text
    finally:
        ctx.sessions = real_sessions
    assert "unit of work" not in opened[:-1]  # the reads
    assert opened[-1] == "unit of work"  # the create
    assert opened.count("read") >= 11

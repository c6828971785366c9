"""The request's session: a write commits before the response, an error rolls it back, a request
that only read ends without a commit, and every route of the API runs in such a transaction."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime

import httpx
import pytest
from fastapi import APIRouter, FastAPI
from fastapi.routing import APIRoute, iter_route_contexts
from sqlalchemy import event, insert, select, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from buildbay.db.engine import FastSelect, after_commit, finish, has_writes, read_rows
from buildbay.deps import SessionDep, TransactionRoute
from buildbay.errors import Conflict
from buildbay.projects.models import Project
from tests.conftest import assert_problem

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


async def test_a_session_that_only_read_ends_without_a_commit(
    sessions: async_sessionmaker[AsyncSession], commits: list[object]
) -> None:
    session = sessions()
    await session.execute(select(Project.id))
    assert not has_writes(session)
    await finish(session, ok=True)
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
    assert has_writes(session)
    await finish(session, ok=True)
    assert len(commits) == 1
    assert len(await _project_names(sessions)) == 1


async def test_a_text_statement_counts_as_a_write(
    sessions: async_sessionmaker[AsyncSession], commits: list[object]
) -> None:
    async with sessions() as db:
        db.add(_project("p"))
        await db.commit()
    session = sessions()
    await session.execute(text("UPDATE projects SET name = 'renamed'"))
    assert has_writes(session)
    await finish(session, ok=True)
    assert await _project_names(sessions) == ["renamed"]


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
        context.original_route
        for context in iter_route_contexts(app.routes)
        if (context.path_format or "").startswith(("/api/", "/storage/", "/healthz", "/readyz"))
    ]
    assert len(routes) > 20
    plain = [r for r in routes if isinstance(r, APIRoute) and not isinstance(r, TransactionRoute)]
    assert plain == []


async def test_a_session_outside_a_transaction_route_is_refused(app: FastAPI) -> None:
    probe = FastAPI()

    @probe.get("/plain")
    async def plain(db: SessionDep) -> dict[str, str]:
        return {}

    probe.state.ctx = app.state.ctx
    transport = httpx.ASGITransport(app=probe, raise_app_exceptions=True)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
        with pytest.raises(RuntimeError, match="SessionDep needs a TransactionRoute"):
            await c.get("/plain")


async def test_read_rows_leaves_an_unused_session_unused(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    async with sessions() as db:
        db.add(_project("prj_committed"))
        await db.commit()
    session = sessions()
    rows = await read_rows(session, FastSelect(select(Project.name)), {})
    assert rows == [{"name": "prj_committed"}]
    # Read on a connection of its own, which is back in the pool: the session holds none.
    assert not session.in_transaction()
    await finish(session, ok=True)


async def test_read_rows_reads_in_the_sessions_transaction_once_it_has_one(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    session = sessions()
    session.add(_project("prj_uncommitted"))
    await session.flush()
    rows = await read_rows(session, FastSelect(select(Project.name)), {})
    assert rows == [{"name": "prj_uncommitted"}]  # its own write, not yet committed
    await finish(session, ok=False)
    assert await _project_names(sessions) == []


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

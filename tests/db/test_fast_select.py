"""FastSelect reads what `Connection.execute` would read, on both databases: the same values of
the same types, parameters in the compiled order, errors as SQLAlchemy's, connections given back."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
import sqlalchemy
from fastapi import FastAPI
from sqlalchemy import bindparam, select, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from buildbay.applications.models import Application, Platform
from buildbay.builds.models import Build, BuildStatus
from buildbay.db.engine import EntityColumns, FastSelect, finish, read_rows
from buildbay.projects.models import Project

CREATED = datetime(2026, 11, 22, 4, 19, 53, 123456, tzinfo=UTC)

_projects = Project.__table__
_NEWEST_BELOW = FastSelect(
    select(_projects.c.id, _projects.c.name, _projects.c.created_at)
    .where(_projects.c.id < bindparam("below"))
    .order_by(_projects.c.id.desc())
    .limit(bindparam("limit"))
)


@pytest.fixture
async def sessions(app: FastAPI) -> async_sessionmaker[AsyncSession]:
    factory: async_sessionmaker[AsyncSession] = app.state.ctx.sessions
    async with factory() as db:
        for n in range(5):
            # An offset zone on the way in: the column stores the UTC instant.
            created = (CREATED + timedelta(minutes=n)).astimezone(timezone(timedelta(hours=-7)))
            db.add(Project(id=f"prj_{n}", name=f"project {n}", created_at=created,
                           updated_at=created))  # fmt: skip
        await db.commit()
    return factory


async def test_rows_match_what_sqlalchemy_reads(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    params = {"below": "prj_4", "limit": 3}
    async with sessions() as db:
        expected = [row._asdict() for row in await db.execute(_NEWEST_BELOW.statement, params)]
    session = sessions()
    rows = await read_rows(session, _NEWEST_BELOW, params)
    await finish(session, ok=True)

    assert rows == expected
    assert [row["id"] for row in rows] == ["prj_3", "prj_2", "prj_1"]
    assert rows[0]["created_at"] == CREATED + timedelta(minutes=3)
    assert all(row["created_at"].tzinfo is UTC for row in rows)


async def test_the_fast_path_and_the_transaction_path_agree(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    params = {"below": "prj_9", "limit": 10}
    fast_session = sessions()
    fast = await read_rows(fast_session, _NEWEST_BELOW, params)
    assert not fast_session.in_transaction()  # read on a pooled connection of its own
    await finish(fast_session, ok=True)

    async with sessions() as db:
        await db.execute(text("SELECT 1"))  # now in a transaction: read on its connection
        assert db.in_transaction()
        in_transaction = await read_rows(db, _NEWEST_BELOW, params)
    assert fast == in_transaction
    assert len(fast) == 5


async def test_a_connection_that_served_a_fast_read_still_runs_sessions_in_transactions(
    app: FastAPI, sessions: async_sessionmaker[AsyncSession]
) -> None:
    # On PostgreSQL the read runs in autocommit; the connection must go back to the pool as it
    # came, or a session's rollback on it would undo nothing.
    engine: AsyncEngine = app.state.ctx.engine
    await engine.dispose()  # from here on, one pooled connection serves both
    session = sessions()
    assert len(await read_rows(session, _NEWEST_BELOW, {"below": "prj_9", "limit": 9})) == 5
    await finish(session, ok=True)
    assert engine.sync_engine.pool.checkedin() == 1  # type: ignore[attr-defined]

    session = sessions()
    session.add(Project(id="prj_undone", name="undone", created_at=CREATED, updated_at=CREATED))
    await session.flush()
    await finish(session, ok=False)

    async with sessions() as db:
        assert await db.get(Project, "prj_undone") is None


async def test_a_database_error_is_sqlalchemys_and_the_connection_goes_back(
    app: FastAPI, sessions: async_sessionmaker[AsyncSession]
) -> None:
    engine: AsyncEngine = app.state.ctx.engine
    missing = FastSelect(select(text("x")).select_from(text("no_such_table")))
    session = sessions()
    with pytest.raises(DBAPIError) as raised:
        await read_rows(session, missing, {})
    await finish(session, ok=False)
    assert "no_such_table" in str(raised.value.orig)
    assert raised.value.hide_parameters  # a log line must not carry what a user sent
    assert engine.sync_engine.pool.checkedout() == 0  # type: ignore[attr-defined]

    # The pool still serves reads afterwards.
    session = sessions()
    assert len(await read_rows(session, _NEWEST_BELOW, {"below": "prj_9", "limit": 2})) == 2
    await finish(session, ok=True)


def test_statements_it_cannot_run_as_compiled_are_refused(app: FastAPI) -> None:
    dialect = app.state.ctx.engine.dialect
    expanding = FastSelect(select(_projects.c.id).where(_projects.c.id.in_(bindparam("ids"))))
    with pytest.raises(ValueError, match="expanding"):
        expanding.plan(dialect)


async def test_the_project_list_reads_a_page_from_the_index_without_sorting(app: FastAPI) -> None:
    """The list of a user's projects walks (user_id, project_id) in order: a page costs the same
    whether the user is in 10 projects or 10,000 (SQLite's plan; PostgreSQL's depends on its
    statistics)."""
    from buildbay.projects.service import _PROJECTS_OF_MEMBER_AFTER

    engine: AsyncEngine = app.state.ctx.engine
    if engine.dialect.name != "sqlite":
        pytest.skip("the plan checked is SQLite's")
    plan = _PROJECTS_OF_MEMBER_AFTER.plan(engine.dialect)
    async with engine.connect() as connection:
        raw = await connection.get_raw_connection()
        steps = [
            row[3]
            for row in raw.driver_connection.execute(  # type: ignore[union-attr]
                "EXPLAIN QUERY PLAN " + plan.sql, plan.parameters(
                    {"user_id": "usr_x", "after_id": "prj_x", "limit": 51})
            )
        ]  # fmt: skip
    assert any("ix_project_members_user_id_project_id" in step for step in steps), steps
    assert not any("TEMP B-TREE" in step for step in steps), steps


async def test_entity_columns_make_the_objects_the_orm_loads(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    # Build.metadata_ is the column "metadata": attribute names, not column names.
    async with sessions() as db:
        db.add(Application(id="app_1", project_id="prj_1", name="app", platform=Platform.ANDROID,
                           created_at=CREATED, updated_at=CREATED))  # fmt: skip
        db.add(Build(id="bld_1", project_id="prj_1", application_id="app_1", file_name="a.apk",
                     file_size=3, status=BuildStatus.READY, storage_key="k",
                     metadata_={"versionCode": 7}, created_at=CREATED,
                     expires_at=CREATED))  # fmt: skip
        await db.commit()
    builds = EntityColumns(Build, "b_")
    query = FastSelect(select(*builds.columns).where(Build.__table__.c.id == bindparam("id")))

    session = sessions()
    [row] = await read_rows(session, query, {"id": "bld_1"})
    await finish(session, ok=True)
    copy = builds.of(row)

    async with sessions() as db:
        loaded = await db.get_one(Build, "bld_1")
        columns = [attr.key for attr in sqlalchemy.inspect(Build).column_attrs]
        assert {k: getattr(copy, k) for k in columns} == {k: getattr(loaded, k) for k in columns}
    assert copy.metadata_ == {"versionCode": 7}
    assert copy.status is BuildStatus.READY
    assert sqlalchemy.inspect(copy).transient
    assert builds.of_outer({**row, "b_id": None}) is None

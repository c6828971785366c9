"""The migrations are the schema: they must build exactly what the models describe."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect
from sqlalchemy.engine import Connection

from buildbay.db import migrate
from buildbay.db.engine import create_engine
from buildbay.db.models import Base


async def test_migrations_build_exactly_the_models(database_url: str) -> None:
    engine = create_engine(database_url)

    def diff(connection: Connection) -> list[object]:
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        return list(compare_metadata(context, Base.metadata))

    async with engine.connect() as connection:
        assert await connection.run_sync(diff) == []
    await engine.dispose()


async def test_downgrade_removes_everything_and_upgrade_restores_it(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite+inline:///{tmp_path / 'roundtrip.db'}")
    await migrate.upgrade(engine)

    def tables(connection: Connection) -> set[str]:
        return set(inspect(connection).get_table_names()) - {"alembic_version"}

    def downgrade(connection: Connection) -> None:
        command.downgrade(migrate.alembic_config(connection), "base")

    async with engine.begin() as connection:
        assert await connection.run_sync(tables) == set(Base.metadata.tables)
        await connection.run_sync(downgrade)
        assert await connection.run_sync(tables) == set()
    await migrate.upgrade(engine)
    async with engine.connect() as connection:
        assert await connection.run_sync(tables) == set(Base.metadata.tables)
    await engine.dispose()

"""Schema migrations (Alembic), run programmatically so no alembic.ini is needed after install."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

MIGRATIONS_DIR = Path(__file__).parent / "migrations"


def alembic_config(connection: Connection | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


async def upgrade(engine: AsyncEngine, revision: str = "head") -> None:
    def _run(connection: Connection) -> None:
        command.upgrade(alembic_config(connection), revision)

    async with engine.begin() as connection:
        await connection.run_sync(_run)


async def is_current(engine: AsyncEngine) -> bool:
    """Whether the database at `engine` has the schema this code was written for (migrated to
    the newest revision). False for an empty database, and for one a newer or older Buildbay
    migrated."""

    def _current(connection: Connection) -> str | None:
        return MigrationContext.configure(connection).get_current_revision()

    async with engine.connect() as connection:
        current = await connection.run_sync(_current)
    return current == ScriptDirectory.from_config(alembic_config()).get_current_head()


async def revision(engine: AsyncEngine, message: str) -> None:
    """Autogenerate a revision against the database at `engine` (a developer's tool)."""

    def _run(connection: Connection) -> None:
        command.revision(alembic_config(connection), message=message, autogenerate=True)

    async with engine.begin() as connection:
        await connection.run_sync(_run)

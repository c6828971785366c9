"""Schema migrations (Alembic), run programmatically so no alembic.ini is needed after install."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
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


class Schema(StrEnum):
    """What a database's schema is to this code."""

    CURRENT = "current"  # migrated to the newest revision this code knows
    MISSING = "missing"  # never migrated: an empty database, or not Buildbay's
    OLDER = "older"  # migrated by an older Buildbay: `buildbay db upgrade` brings it up
    NEWER = "newer"  # migrated by a newer Buildbay (an upgrade under way, or a rollback)


async def schema_of(engine: AsyncEngine) -> Schema:
    """What the schema of the database at `engine` is to this code."""

    def _current(connection: Connection) -> str | None:
        return MigrationContext.configure(connection).get_current_revision()

    async with engine.connect() as connection:
        current = await connection.run_sync(_current)
    script = ScriptDirectory.from_config(alembic_config())
    if current is None:
        return Schema.MISSING
    if current == script.get_current_head():
        return Schema.CURRENT
    try:
        script.get_revision(current)
    except CommandError:  # a revision these migrations do not have
        return Schema.NEWER
    return Schema.OLDER


async def revision(engine: AsyncEngine, message: str) -> None:
    """Autogenerate a revision against the database at `engine` (a developer's tool)."""

    def _run(connection: Connection) -> None:
        command.revision(alembic_config(connection), message=message, autogenerate=True)

    async with engine.begin() as connection:
        await connection.run_sync(_run)

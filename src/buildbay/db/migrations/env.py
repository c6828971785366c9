"""Alembic environment: runs on the connection that buildbay.db.migrate hands in."""

from __future__ import annotations

from alembic import context
from sqlalchemy.engine import Connection

from buildbay.db.models import Base

target_metadata = Base.metadata


def run_on(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("run migrations through `buildbay db upgrade`")
run_on(connection)

"""users.credentials_epoch, and the epoch each session and API token was made in: a password
reset moves the user's on, and a credential made by a request that began before the reset
committed (a login with the old password, a token asked for by a session the reset ends) keeps
the older one and never authenticates (issue 34). Existing rows all start at 0.

Revision ID: 0020
Revises: 0019
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TABLES = ("users", "sessions", "api_tokens")


def upgrade() -> None:
    # Plain ADD COLUMN, not batch mode: on SQLite batch mode copies the table and drops the
    # old one, and dropping `users` with foreign keys on empties every row that points at it.
    for table in _TABLES:
        op.add_column(
            table,
            sa.Column("credentials_epoch", sa.Integer(), nullable=False, server_default="0"),
        )


def downgrade() -> None:
    # In place on both databases (SQLite since 3.35), for the same reason.
    for table in reversed(_TABLES):
        op.execute(f"ALTER TABLE {table} DROP COLUMN credentials_epoch")

"""Staged rollout (issue 39): the share of a channel's installs, 1 to 100 percent, that a build
published to it is offered to (the update check by a stable per-install bucket, electron-updater
by `stagingPercentage`). Every build already published stays offered to all: 100.

Revision ID: 0036
Revises: 0035
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0036"
down_revision: str | None = "0035"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # In place (see 0035): a batch copy on SQLite would drop what points at build_channels' rows.
    op.add_column(
        "build_channels",
        sa.Column("rollout_percent", sa.SmallInteger(), nullable=False, server_default="100"),
    )


def downgrade() -> None:
    op.execute("ALTER TABLE build_channels DROP COLUMN rollout_percent")

"""Desktop builds (issue 39): each build's SHA-512 (base64, as electron-updater reads it), the
architecture it is built for, and Sparkle's EdDSA signature of its file, for the updaters' feeds.

Revision ID: 0035
Revises: 0033
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0035"
down_revision: str | None = "0033"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # In place on both databases: a batch copy of `builds` on SQLite would drop the table that
    # install links, icons and channels point at.
    op.add_column("builds", sa.Column("sha512", sa.String(length=88), nullable=True))
    op.add_column("builds", sa.Column("architecture", sa.String(length=16), nullable=True))
    op.add_column("builds", sa.Column("sparkle_ed_signature", sa.String(length=88), nullable=True))


def downgrade() -> None:
    # In place too (SQLite since 3.35), for the same reason.
    for column in ("sparkle_ed_signature", "architecture", "sha512"):
        op.execute(f"ALTER TABLE builds DROP COLUMN {column}")

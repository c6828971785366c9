"""A build's blockmap (issue 39): electron-builder uploads `<file>.blockmap` beside a desktop
installer, which electron-updater reads for a differential download. Stored under the build's
storage key + `.blockmap`; its size (the feed's `blockMapSize`) and SHA-256 here, null for a
build without one.

Revision ID: 0038
Revises: 0037
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0038"
down_revision: str | None = "0037"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # In place (see 0035): a batch copy on SQLite would drop what points at builds' rows.
    op.add_column("builds", sa.Column("blockmap_size", sa.BigInteger(), nullable=True))
    op.add_column("builds", sa.Column("blockmap_sha256", sa.String(length=64), nullable=True))


def downgrade() -> None:
    op.execute("ALTER TABLE builds DROP COLUMN blockmap_sha256")
    op.execute("ALTER TABLE builds DROP COLUMN blockmap_size")

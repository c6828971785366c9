"""Desktop builds (issue 39): each build's SHA-512 (base64, as electron-updater reads it), the
architecture it is built for, and Sparkle's EdDSA signature of its file, for the updaters' feeds.

Revision ID: 0035
Revises: 0031
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0035"
down_revision: str | None = "0031"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("builds") as batch:
        batch.add_column(sa.Column("sha512", sa.String(length=88), nullable=True))
        batch.add_column(sa.Column("architecture", sa.String(length=16), nullable=True))
        batch.add_column(sa.Column("sparkle_ed_signature", sa.String(length=88), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("builds") as batch:
        batch.drop_column("sparkle_ed_signature")
        batch.drop_column("architecture")
        batch.drop_column("sha512")

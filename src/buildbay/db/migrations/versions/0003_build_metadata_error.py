"""builds.metadata_error: why a build's file did not parse

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("builds") as batch:
        batch.add_column(sa.Column("metadata_error", sa.String(length=500), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("builds") as batch:
        batch.drop_column("metadata_error")

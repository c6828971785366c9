"""builds.storage_version: the object version verify checked

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("builds") as batch:
        batch.add_column(sa.Column("storage_version", sa.String(length=1024), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("builds") as batch:
        batch.drop_column("storage_version")

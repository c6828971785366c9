"""Multipart uploads of large builds (issue 17): a build's part size and storage upload id, and
why a build checked in the background failed.

The new `processing` and `failed` statuses need no change: a status is a plain string.

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("builds") as batch:
        batch.add_column(sa.Column("part_size", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("upload_id", sa.String(length=1024), nullable=True))
        batch.add_column(sa.Column("failure_code", sa.String(length=40), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("builds") as batch:
        batch.drop_column("failure_code")
        batch.drop_column("upload_id")
        batch.drop_column("part_size")

"""invitation_counts and invitation_blocks: invitation mails capped a day per address, account
and project, and addresses that want no invitation at all (issue 34)

Revision ID: 0015
Revises: 0014
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "invitation_counts",
        sa.Column("key", sa.String(length=80), nullable=False),
        sa.Column("day", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("key", "day", name=op.f("pk_invitation_counts")),
    )
    op.create_index("ix_invitation_counts_day", "invitation_counts", ["day"])
    op.create_table(
        "invitation_blocks",
        sa.Column("address_hash", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("address_hash", name=op.f("pk_invitation_blocks")),
    )


def downgrade() -> None:
    op.drop_table("invitation_blocks")
    op.drop_index("ix_invitation_counts_day", table_name="invitation_counts")
    op.drop_table("invitation_counts")

"""Which join link a group's tester came through (issue 40): `group_testers.join_link_id`, so
that a link's page in the console says how many of those who joined are still in the group.
No foreign key: a link is never deleted but with its group, whose testers go with it.

Revision ID: 0049
Revises: 0048
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0049"
down_revision: str | None = "0048"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("group_testers", sa.Column("join_link_id", sa.String(length=32), nullable=True))
    op.create_index("ix_group_testers_join_link_id", "group_testers", ["join_link_id"])


def downgrade() -> None:
    op.drop_index("ix_group_testers_join_link_id", table_name="group_testers")
    op.execute("ALTER TABLE group_testers DROP COLUMN join_link_id")

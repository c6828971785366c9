"""A build's history (issue 39, staged rollout): `build_events`, one row per thing done to a
build (first: a change of its rollout percentage on a channel, with who, from and to), shown
on the console's build page and deleted with the build.

Revision ID: 0037
Revises: 0036
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0037"
down_revision: str | None = "0036"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "build_events",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("build_id", sa.String(length=32), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("actor_id", sa.String(length=32), nullable=True),
        sa.Column("kind", sa.String(length=40), nullable=False),
        sa.Column("detail", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["build_id"], ["builds.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["actor_id"], ["users.id"], ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_build_events_build_id_id", "build_events", ["build_id", "id"])


def downgrade() -> None:
    op.drop_index("ix_build_events_build_id_id", table_name="build_events")
    op.drop_table("build_events")

"""Public join links of tester groups (issue 40): `join_links` (one live per group, its token
hashed, its count of those who joined) and `join_requests` (an e-mail given on a link's page,
waiting for its confirmation mail's link).

Revision ID: 0041
Revises: 0038
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0041"
down_revision: str | None = "0038"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "join_links",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("project_id", sa.String(length=32), nullable=False),
        sa.Column("group_id", sa.String(length=32), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("max_testers", sa.Integer(), nullable=True),
        sa.Column("allowed_domains", sa.JSON(), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_by", sa.String(length=32), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("joined_count", sa.Integer(), server_default="0", nullable=False),
        sa.ForeignKeyConstraint(["project_id"], ["projects.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["group_id"], ["tester_groups.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["created_by"], ["users.id"], ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("token_hash"),
    )
    op.create_index("ix_join_links_project_id", "join_links", ["project_id"])
    op.create_index("ix_join_links_group_id", "join_links", ["group_id"])
    op.create_table(
        "join_requests",
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("link_id", sa.String(length=32), nullable=False),
        sa.Column("email", sa.String(length=320), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("used_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["link_id"], ["join_links.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("token_hash"),
    )
    op.create_index("ix_join_requests_link_id", "join_requests", ["link_id"])


def downgrade() -> None:
    op.drop_index("ix_join_requests_link_id", table_name="join_requests")
    op.drop_table("join_requests")
    op.drop_index("ix_join_links_group_id", table_name="join_links")
    op.drop_index("ix_join_links_project_id", table_name="join_links")
    op.drop_table("join_links")

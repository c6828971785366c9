"""Retention that says what it deletes (issue 36): the application's `retention.protect`
settings (on by default, for existing applications too), and the deleted builds remembered for a
while (removed_builds), with their install links (removed_install_links), for the application's
page and for an install page that offers a newer build.

Revision ID: 0022
Revises: 0020
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_PROTECT = ("retention_protect_groups", "retention_protect_channels")


def upgrade() -> None:
    # Plain ADD COLUMN, not batch mode: on SQLite batch mode copies the table and drops the
    # old one, and dropping `applications` with foreign keys on empties every row that points at
    # it (migration 0020 says the same of `users`).
    for column in _PROTECT:
        op.add_column(
            "applications",
            sa.Column(column, sa.Boolean(), nullable=False, server_default=sa.true()),
        )
    op.create_table(
        "removed_builds",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column(
            "project_id", sa.String(32), sa.ForeignKey("projects.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column(
            "application_id", sa.String(32),
            sa.ForeignKey("applications.id", ondelete="CASCADE"), nullable=False,
        ),
        sa.Column("file_name", sa.String(255), nullable=False),
        sa.Column("version", sa.String(255), nullable=True),
        sa.Column("reason", sa.String(20), nullable=False),
        sa.Column(
            "removed_by", sa.String(32), sa.ForeignKey("users.id", ondelete="SET NULL"),
            nullable=True,
        ),
        sa.Column("removed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("distributed", sa.Boolean(), nullable=False),
    )  # fmt: skip
    op.create_index(
        "ix_removed_builds_application_id_removed_at",
        "removed_builds",
        ["application_id", "removed_at"],
    )
    op.create_table(
        "removed_install_links",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column(
            "build_id", sa.String(32), sa.ForeignKey("removed_builds.id", ondelete="CASCADE"),
            nullable=False,
        ),
    )  # fmt: skip
    op.create_index("ix_removed_install_links_build_id", "removed_install_links", ["build_id"])


def downgrade() -> None:
    op.drop_index("ix_removed_install_links_build_id", "removed_install_links")
    op.drop_table("removed_install_links")
    op.drop_index("ix_removed_builds_application_id_removed_at", "removed_builds")
    op.drop_table("removed_builds")
    # In place on both databases (SQLite since 3.35), for the same reason as above.
    for column in reversed(_PROTECT):
        op.execute(f"ALTER TABLE applications DROP COLUMN {column}")

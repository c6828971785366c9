"""applications.version_policy (`warn` or `unique`: what verify does with a version code that a
ready build of other bytes already has), and an index to find a ready build by its bytes'
SHA-256 within an application (a duplicate upload, issue 36). Existing applications warn.

Revision ID: 0023
Revises: 0020
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0023"
down_revision: str | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Plain ADD COLUMN, not batch mode: on SQLite batch mode copies the table and drops the
    # old one, and dropping `applications` would cascade to every build of every application.
    op.add_column(
        "applications",
        sa.Column("version_policy", sa.String(length=20), nullable=False, server_default="warn"),
    )
    op.create_index("ix_builds_application_id_sha256", "builds", ["application_id", "sha256"])


def downgrade() -> None:
    op.drop_index("ix_builds_application_id_sha256", table_name="builds")
    # In place on both databases (SQLite since 3.35), for the same reason.
    op.execute("ALTER TABLE applications DROP COLUMN version_policy")

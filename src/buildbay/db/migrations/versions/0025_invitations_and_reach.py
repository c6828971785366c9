"""Invitations and reach (issue 36): an invitation's earlier links keep working after a resend
(`invitation_links`), an invited person may decline (`invitations.declined_at`), and a build's
page says to which groups and people it was distributed, by whom and when
(`build_distributions`).

Existing rows: the links replaced by resends before this revision are gone (only their hash
was kept, and it was overwritten), so they stay invalid; distributions made before it have no
row, and the build's page lists their groups and people without who and when.

Revision ID: 0025
Revises: 0020
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0025"
down_revision: str | None = "0023"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "invitation_links",
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("invitation_id", sa.String(length=32), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["invitation_id"], ["invitations.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("token_hash"),
    )
    op.create_index(
        "ix_invitation_links_invitation_id", "invitation_links", ["invitation_id"], unique=False
    )
    # Plain ADD COLUMN, not batch mode: on SQLite batch mode copies the table and drops the
    # old one, and dropping `invitations` with foreign keys on empties invitation_groups.
    op.add_column("invitations", sa.Column("declined_at", sa.DateTime(timezone=True)))
    op.create_table(
        "build_distributions",
        sa.Column("build_id", sa.String(length=32), nullable=False),
        sa.Column("kind", sa.String(length=20), nullable=False),
        sa.Column("target", sa.String(length=320), nullable=False),
        sa.Column("distributed_by", sa.String(length=32), nullable=True),
        sa.Column("distributed_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["build_id"], ["builds.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["distributed_by"], ["users.id"], ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("build_id", "kind", "target"),
    )


def downgrade() -> None:
    op.drop_table("build_distributions")
    op.execute("ALTER TABLE invitations DROP COLUMN declined_at")
    op.drop_index("ix_invitation_links_invitation_id", table_name="invitation_links")
    op.drop_table("invitation_links")

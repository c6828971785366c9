"""email_changes: the address an account asked to move to, until the link mailed there is
followed; secrets_shown_once: a new API token or webhook secret the console shows on the page
its form redirects to, split between this row and the browser's cookie (issue 36: a reload of
the form's answer made a second token or webhook)

Revision ID: 0021
Revises: 0020
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "email_changes",
        sa.Column("user_id", sa.String(length=32), nullable=False),
        sa.Column("new_email", sa.String(length=320), nullable=False),
        sa.Column("requested_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("user_id"),
    )
    op.create_table(
        "secrets_shown_once",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("session_id", sa.String(length=32), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("subject_id", sa.String(length=32), nullable=False),
        sa.Column("sealed", sa.String(length=512), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["session_id"], ["sessions.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_secrets_shown_once_session_id", "secrets_shown_once", ["session_id"])
    op.create_index("ix_secrets_shown_once_created_at", "secrets_shown_once", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_secrets_shown_once_created_at", table_name="secrets_shown_once")
    op.drop_index("ix_secrets_shown_once_session_id", table_name="secrets_shown_once")
    op.drop_table("secrets_shown_once")
    op.drop_table("email_changes")

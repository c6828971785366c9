"""`applications.feedback_mode` long enough for its values: `anyone-with-update-key` is 22
characters, and 0031 made the column VARCHAR(20), which PostgreSQL enforces (setting the mode
answered 500).

The column is made anew and its values copied, with plain ALTER TABLEs on both databases: on
SQLite, changing a column's type otherwise means rebuilding `applications` (batch mode), whose
drop would cascade to its builds (see 0025).

Revision ID: 0032
Revises: 0031
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0032"
down_revision: str | None = "0031"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _feedback_mode_of_length(length: int) -> None:
    op.execute("ALTER TABLE applications RENAME COLUMN feedback_mode TO feedback_mode_before")
    op.add_column(
        "applications",
        sa.Column(
            "feedback_mode",
            sa.String(length=length),
            nullable=False,
            server_default="testers-only",
        ),
    )
    # What does not fit (going back down) falls back to the default, the stricter mode.
    op.get_bind().execute(
        sa.text(
            "UPDATE applications SET feedback_mode = feedback_mode_before "
            "WHERE length(feedback_mode_before) <= :length"
        ),
        {"length": length},
    )
    op.execute("ALTER TABLE applications DROP COLUMN feedback_mode_before")


def upgrade() -> None:
    _feedback_mode_of_length(32)


def downgrade() -> None:
    _feedback_mode_of_length(20)

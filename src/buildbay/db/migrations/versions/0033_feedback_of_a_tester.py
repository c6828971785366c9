"""An index on feedback's reporter (`tester_id`, then `id`): a tester's own feedback across
projects, newest first (`GET /api/account/feedback`), reads a page along it instead of every
feedback of their projects; and deleting an account (its feedback's `tester_id` set to NULL)
finds that feedback by it.

Revision ID: 0033
Revises: 0032
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0033"
down_revision: str | None = "0032"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_feedback_tester_id_id", "feedback", ["tester_id", "id"])


def downgrade() -> None:
    op.drop_index("ix_feedback_tester_id_id", table_name="feedback")

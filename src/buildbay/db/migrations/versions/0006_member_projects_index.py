"""project_members: index (user_id, project_id) instead of (user_id)

The list of a user's projects reads the user's memberships in project order from it, a page at
a time; with the index on user_id alone, every membership was read and sorted for each page.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index(
        "ix_project_members_user_id_project_id", "project_members", ["user_id", "project_id"]
    )
    op.drop_index("ix_project_members_user_id", table_name="project_members")


def downgrade() -> None:
    op.create_index("ix_project_members_user_id", "project_members", ["user_id"])
    op.drop_index("ix_project_members_user_id_project_id", table_name="project_members")

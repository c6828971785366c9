"""api_tokens: an optional scope and an optional list of the projects a token may reach

Both null on the tokens that exist: they keep the full access they were created with.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("api_tokens") as table:
        table.add_column(sa.Column("scope", sa.String(length=20), nullable=True))
        table.add_column(sa.Column("project_ids", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("api_tokens") as table:
        table.drop_column("project_ids")
        table.drop_column("scope")

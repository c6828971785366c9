"""Chat formats of webhooks (issue 40): what an endpoint is sent, `standard` (the signed
Standard Webhooks event, as every endpoint so far) or a chat message (`slack`, `discord`,
`teams`, `google-chat`) made from the event.

Revision ID: 0042
Revises: 0041
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0042"
down_revision: str | None = "0041"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # In place (see 0035): every endpoint so far keeps the signed event.
    op.add_column(
        "webhooks",
        sa.Column("format", sa.String(length=20), nullable=False, server_default="standard"),
    )


def downgrade() -> None:
    op.execute("ALTER TABLE webhooks DROP COLUMN format")

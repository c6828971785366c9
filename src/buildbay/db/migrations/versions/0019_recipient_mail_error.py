"""build_recipients.mail_error: why a tester's new-build mail could not be sent (an address
mail cannot reach), recorded for that tester alone while the others are mailed (issue 34)

Revision ID: 0019
Revises: 0017
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0019"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("build_recipients") as batch:
        batch.add_column(sa.Column("mail_error", sa.String(length=500), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("build_recipients") as batch:
        batch.drop_column("mail_error")

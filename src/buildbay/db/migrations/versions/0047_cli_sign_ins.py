"""The command line's sign-in through the console (issue 41): `cli_sign_ins`, a loopback
redirect's one-time code (RFC 8252) or a device grant (RFC 8628) until it becomes an API token,
its secrets stored only as hashes.

Revision ID: 0047
Revises: 0045
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0047"
down_revision: str | None = "0045"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "cli_sign_ins",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("secret_hash", sa.String(length=64), nullable=False),
        sa.Column("user_code_hash", sa.String(length=64), nullable=True),
        sa.Column("client_name", sa.String(length=100), nullable=False),
        sa.Column("redirect_uri", sa.String(length=300), nullable=True),
        sa.Column("code_challenge", sa.String(length=128), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("user_id", sa.String(length=32), nullable=True),
        sa.Column("credentials_epoch", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("polled_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("interval_seconds", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("secret_hash"),
        sa.UniqueConstraint("user_code_hash"),
    )
    op.create_index("ix_cli_sign_ins_user_id", "cli_sign_ins", ["user_id"])
    op.create_index("ix_cli_sign_ins_expires_at", "cli_sign_ins", ["expires_at"])


def downgrade() -> None:
    op.drop_index("ix_cli_sign_ins_expires_at", table_name="cli_sign_ins")
    op.drop_index("ix_cli_sign_ins_user_id", table_name="cli_sign_ins")
    op.drop_table("cli_sign_ins")

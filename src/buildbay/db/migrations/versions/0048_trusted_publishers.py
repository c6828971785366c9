"""Trusted publishing (issue 41): `trusted_publishers` (the CI identities an application
trusts), `used_id_tokens` (ID tokens already exchanged, one row each until it expires, unique
per issuer and jti), and on `api_tokens` what an exchanged token is limited to: its application,
its publisher and the CI identity acting through it.

Revision ID: 0048
Revises: 0047
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0048"
down_revision: str | None = "0047"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "trusted_publishers",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("application_id", sa.String(length=32), nullable=False),
        sa.Column("issuer", sa.String(length=255), nullable=False),
        sa.Column("subject_pattern", sa.String(length=500), nullable=False),
        sa.Column("audience", sa.String(length=255), nullable=False),
        sa.Column("created_by", sa.String(length=32), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["application_id"],
            ["applications.id"],
            name=op.f("fk_trusted_publishers_application_id_applications"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["created_by"],
            ["users.id"],
            name=op.f("fk_trusted_publishers_created_by_users"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_trusted_publishers")),
    )
    op.create_index(
        "ix_trusted_publishers_application_id_id", "trusted_publishers", ["application_id", "id"]
    )
    op.create_index("ix_trusted_publishers_issuer", "trusted_publishers", ["issuer"])
    op.create_table(
        "used_id_tokens",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("issuer", sa.String(length=255), nullable=False),
        sa.Column("jti", sa.String(length=255), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_used_id_tokens")),
        sa.UniqueConstraint("issuer", "jti", name="uq_used_id_tokens_issuer_jti"),
    )
    op.create_index("ix_used_id_tokens_expires_at", "used_id_tokens", ["expires_at"])
    op.add_column("api_tokens", sa.Column("application_id", sa.String(length=32), nullable=True))
    op.add_column("api_tokens", sa.Column("publisher_id", sa.String(length=32), nullable=True))
    op.add_column("api_tokens", sa.Column("ci_identity", sa.String(length=320), nullable=True))
    op.create_index(op.f("ix_api_tokens_publisher_id"), "api_tokens", ["publisher_id"])


def downgrade() -> None:
    op.drop_index(op.f("ix_api_tokens_publisher_id"), table_name="api_tokens")
    with op.batch_alter_table("api_tokens") as table:
        table.drop_column("ci_identity")
        table.drop_column("publisher_id")
        table.drop_column("application_id")
    op.drop_index("ix_used_id_tokens_expires_at", table_name="used_id_tokens")
    op.drop_table("used_id_tokens")
    op.drop_index("ix_trusted_publishers_issuer", table_name="trusted_publishers")
    op.drop_index("ix_trusted_publishers_application_id_id", table_name="trusted_publishers")
    op.drop_table("trusted_publishers")

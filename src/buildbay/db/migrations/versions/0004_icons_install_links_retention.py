"""Build icons, builds.version_code, install links, application retention

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("builds") as batch:
        batch.add_column(sa.Column("version_code", sa.BigInteger(), nullable=True))
        batch.add_column(
            sa.Column("has_icon", sa.Boolean(), server_default=sa.false(), nullable=False)
        )
        batch.create_index(
            "ix_builds_application_id_version_code_id",
            ["application_id", "version_code", "id"],
        )
    with op.batch_alter_table("applications") as batch:
        batch.add_column(sa.Column("retention_keep_last", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("retention_keep_days", sa.Integer(), nullable=True))
    op.create_table(
        "build_icons",
        sa.Column("build_id", sa.String(length=32), nullable=False),
        sa.Column("png", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(["build_id"], ["builds.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("build_id"),
    )
    op.create_table(
        "install_links",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("build_id", sa.String(length=32), nullable=False),
        sa.Column("created_by", sa.String(length=32), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["build_id"], ["builds.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["created_by"], ["users.id"], ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_install_links_build_id", "install_links", ["build_id"])


def downgrade() -> None:
    op.drop_index("ix_install_links_build_id", table_name="install_links")
    op.drop_table("install_links")
    op.drop_table("build_icons")
    with op.batch_alter_table("applications") as batch:
        batch.drop_column("retention_keep_days")
        batch.drop_column("retention_keep_last")
    with op.batch_alter_table("builds") as batch:
        batch.drop_index("ix_builds_application_id_version_code_id")
        batch.drop_column("has_icon")
        batch.drop_column("version_code")

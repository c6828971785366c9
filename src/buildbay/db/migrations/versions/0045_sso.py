"""Sign-in with an identity provider (issue 41): `sso_identities` (the provider's issuer and
subject of a person, and their account), `sso_group_mappings` (a project's group-to-role rules)
and `sso_memberships` (the memberships those rules made: the only ones they change or remove).

Revision ID: 0045
Revises: 0044
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0045"
down_revision: str | None = "0044"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "sso_identities",
        sa.Column("issuer", sa.String(length=500), nullable=False),
        sa.Column("subject", sa.String(length=255), nullable=False),
        sa.Column("user_id", sa.String(length=32), nullable=False),
        sa.Column("email", sa.String(length=320), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_sign_in_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("issuer", "subject"),
    )
    op.create_index("ix_sso_identities_user_id", "sso_identities", ["user_id"])
    op.create_table(
        "sso_group_mappings",
        sa.Column("project_id", sa.String(length=32), nullable=False),
        sa.Column("group_name", sa.String(length=256), nullable=False),
        sa.Column("role", sa.String(length=20), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["project_id"], ["projects.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("project_id", "group_name"),
    )
    op.create_table(
        "sso_memberships",
        sa.Column("project_id", sa.String(length=32), nullable=False),
        sa.Column("user_id", sa.String(length=32), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["project_id", "user_id"],
            ["project_members.project_id", "project_members.user_id"],
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("project_id", "user_id"),
    )
    op.create_index("ix_sso_memberships_user_id", "sso_memberships", ["user_id"])


def downgrade() -> None:
    op.drop_index("ix_sso_memberships_user_id", table_name="sso_memberships")
    op.drop_table("sso_memberships")
    op.drop_table("sso_group_mappings")
    op.drop_index("ix_sso_identities_user_id", table_name="sso_identities")
    op.drop_table("sso_identities")

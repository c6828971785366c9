"""iOS devices (issue 37): the devices testers enroll (`devices`), the profile service's
challenges (`device_challenges`), the UDIDs of each .ipa's provisioning profile
(`build_profile_devices`), a project's App Store Connect key (`apple_api_keys`) and the devices
registered with Apple through it (`apple_device_registrations`), and a member's wish for a mail
per enrolled device (`project_members.device_mail`).

Existing rows: builds verified before this revision have no profile UDIDs stored (their pages
say the profile's devices are not known; a new upload of the file reads them).

Revision ID: 0026
Revises: 0025
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0026"
down_revision: str | None = "0025"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "devices",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("user_id", sa.String(length=32), nullable=False),
        sa.Column("udid", sa.String(length=40), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("model", sa.String(length=64), nullable=False),
        sa.Column("os_version", sa.String(length=32), nullable=False),
        sa.Column("platform", sa.String(length=20), nullable=False),
        sa.Column("serial", sa.String(length=64), nullable=True),
        sa.Column("enrolled_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("udid"),
    )
    op.create_index("ix_devices_user_id_id", "devices", ["user_id", "id"], unique=False)
    op.create_table(
        "device_challenges",
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("user_id", sa.String(length=32), nullable=False),
        sa.Column("build_id", sa.String(length=32), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("used_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["build_id"], ["builds.id"], ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("token_hash"),
    )
    op.create_index("ix_device_challenges_user_id", "device_challenges", ["user_id"], unique=False)
    op.create_table(
        "build_profile_devices",
        sa.Column("build_id", sa.String(length=32), nullable=False),
        sa.Column("udid", sa.String(length=40), nullable=False),
        sa.ForeignKeyConstraint(["build_id"], ["builds.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("build_id", "udid"),
    )
    op.create_table(
        "apple_api_keys",
        sa.Column("project_id", sa.String(length=32), nullable=False),
        sa.Column("key_id", sa.String(length=32), nullable=False),
        sa.Column("issuer_id", sa.String(length=64), nullable=False),
        sa.Column("private_key_encrypted", sa.LargeBinary(), nullable=False),
        sa.Column("created_by", sa.String(length=32), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["project_id"], ["projects.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["created_by"], ["users.id"], ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("project_id"),
    )
    op.create_table(
        "apple_device_registrations",
        sa.Column("project_id", sa.String(length=32), nullable=False),
        sa.Column("device_id", sa.String(length=32), nullable=False),
        sa.Column("apple_device_id", sa.String(length=64), nullable=True),
        sa.Column("registered_by", sa.String(length=32), nullable=True),
        sa.Column("registered_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["project_id"], ["projects.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["device_id"], ["devices.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["registered_by"], ["users.id"], ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("project_id", "device_id"),
    )
    # Plain ADD COLUMN, not batch mode (see 0025).
    op.add_column(
        "project_members",
        sa.Column("device_mail", sa.Boolean(), nullable=False, server_default=sa.false()),
    )


def downgrade() -> None:
    op.execute("ALTER TABLE project_members DROP COLUMN device_mail")
    op.drop_table("apple_device_registrations")
    op.drop_table("apple_api_keys")
    op.drop_table("build_profile_devices")
    op.drop_index("ix_device_challenges_user_id", table_name="device_challenges")
    op.drop_table("device_challenges")
    op.drop_index("ix_devices_user_id_id", table_name="devices")
    op.drop_table("devices")

"""Release channels, mandatory builds and update keys (in-app updates, issue 18)

Every application that exists gets its `default` channel, with its ready builds published to
it, and an update key.

Revision ID: 0010
Revises: 0008
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

from buildbay.ids import new_id

revision: str = "0010"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

UPDATE_KEY_PREFIX = "bbu_"  # as applications/keys.py makes them


def upgrade() -> None:
    with op.batch_alter_table("builds") as batch:
        batch.add_column(
            sa.Column("mandatory", sa.Boolean(), server_default=sa.false(), nullable=False)
        )
    with op.batch_alter_table("applications") as batch:
        batch.add_column(sa.Column("update_key", sa.String(length=64), nullable=True))
    op.create_table(
        "channels",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("application_id", sa.String(length=32), nullable=False),
        sa.Column("name", sa.String(length=40), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["application_id"],
            ["applications.id"],
            name=op.f("fk_channels_application_id_applications"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_channels")),
        sa.UniqueConstraint("application_id", "name", name="uq_channels_application_name"),
    )
    op.create_table(
        "build_channels",
        sa.Column("channel_id", sa.String(length=32), nullable=False),
        sa.Column("build_id", sa.String(length=32), nullable=False),
        sa.ForeignKeyConstraint(
            ["build_id"],
            ["builds.id"],
            name=op.f("fk_build_channels_build_id_builds"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["channel_id"],
            ["channels.id"],
            name=op.f("fk_build_channels_channel_id_channels"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("channel_id", "build_id", name=op.f("pk_build_channels")),
    )
    op.create_index(op.f("ix_build_channels_build_id"), "build_channels", ["build_id"])
    op.create_table(
        "update_keys",
        sa.Column("key", sa.String(length=64), nullable=False),
        sa.Column("application_id", sa.String(length=32), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["application_id"],
            ["applications.id"],
            name=op.f("fk_update_keys_application_id_applications"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_update_keys")),
    )
    op.create_index(op.f("ix_update_keys_application_id"), "update_keys", ["application_id"])
    _fill()


def _fill() -> None:
    """The existing applications' default channels (with their ready builds) and keys."""
    bind = op.get_bind()
    applications = sa.table("applications", sa.column("id"), sa.column("update_key"))
    channels = sa.table(
        "channels",
        sa.column("id"),
        sa.column("application_id"),
        sa.column("name"),
        sa.column("created_at", sa.DateTime(timezone=True)),
    )
    keys = sa.table(
        "update_keys",
        sa.column("key"),
        sa.column("application_id"),
        sa.column("created_at", sa.DateTime(timezone=True)),
        sa.column("expires_at", sa.DateTime(timezone=True)),
    )
    builds = sa.table("builds", sa.column("id"), sa.column("application_id"), sa.column("status"))
    build_channels = sa.table("build_channels", sa.column("channel_id"), sa.column("build_id"))
    now = datetime.now(UTC)
    for (application_id,) in bind.execute(sa.select(applications.c.id)).all():
        key = UPDATE_KEY_PREFIX + secrets.token_urlsafe(24)
        bind.execute(
            channels.insert().values(
                id=new_id("chn"), application_id=application_id, name="default", created_at=now
            )
        )
        bind.execute(
            keys.insert().values(
                key=key, application_id=application_id, created_at=now, expires_at=None
            )
        )
        bind.execute(
            applications.update().where(applications.c.id == application_id).values(update_key=key)
        )
    bind.execute(
        build_channels.insert().from_select(
            ["channel_id", "build_id"],
            sa.select(channels.c.id, builds.c.id)
            .join(channels, channels.c.application_id == builds.c.application_id)
            .where(channels.c.name == "default", builds.c.status == "ready"),
        )
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_update_keys_application_id"), table_name="update_keys")
    op.drop_table("update_keys")
    op.drop_index(op.f("ix_build_channels_build_id"), table_name="build_channels")
    op.drop_table("build_channels")
    op.drop_table("channels")
    with op.batch_alter_table("applications") as batch:
        batch.drop_column("update_key")
    with op.batch_alter_table("builds") as batch:
        batch.drop_column("mandatory")

"""Tester groups, distribution of builds to groups and e-mails, install events (issue 15)

Every application distributes its builds to `everyone` (all of its project's members) unless
told otherwise, and every build that exists is distributed to `everyone`: testers keep seeing
what they saw.

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

EVERYONE = "everyone"  # distribution/models.py


def _fk(table: str, column: str, target: str, ondelete: str) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(
        [column],
        [f"{target}.id"],
        name=op.f(f"fk_{table}_{column}_{target}"),
        ondelete=ondelete,
    )


def _when(name: str, *, nullable: bool = False) -> sa.Column[datetime]:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    with op.batch_alter_table("applications") as batch:
        batch.add_column(sa.Column("auto_distribute_groups", sa.JSON(), nullable=True))
        batch.add_column(
            sa.Column(
                "install_link_days", sa.Integer(), server_default=sa.text("14"), nullable=False
            )
        )
    applications = sa.table("applications", sa.column("auto_distribute_groups", sa.JSON()))
    op.get_bind().execute(applications.update().values(auto_distribute_groups=[EVERYONE]))
    with op.batch_alter_table("applications") as batch:
        batch.alter_column("auto_distribute_groups", existing_type=sa.JSON(), nullable=False)

    op.create_table(
        "tester_groups",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("project_id", sa.String(length=32), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        _when("created_at"),
        _fk("tester_groups", "project_id", "projects", "CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tester_groups")),
        sa.UniqueConstraint("project_id", "name", name="uq_tester_groups_project_name"),
    )
    op.create_table(
        "group_testers",
        sa.Column("group_id", sa.String(length=32), nullable=False),
        sa.Column("user_id", sa.String(length=32), nullable=False),
        _when("added_at"),
        _fk("group_testers", "group_id", "tester_groups", "CASCADE"),
        _fk("group_testers", "user_id", "users", "CASCADE"),
        sa.PrimaryKeyConstraint("group_id", "user_id", name=op.f("pk_group_testers")),
    )
    op.create_index(op.f("ix_group_testers_user_id"), "group_testers", ["user_id"])
    op.create_table(
        "invitation_groups",
        sa.Column("invitation_id", sa.String(length=32), nullable=False),
        sa.Column("group_id", sa.String(length=32), nullable=False),
        _fk("invitation_groups", "invitation_id", "invitations", "CASCADE"),
        _fk("invitation_groups", "group_id", "tester_groups", "CASCADE"),
        sa.PrimaryKeyConstraint("invitation_id", "group_id", name=op.f("pk_invitation_groups")),
    )
    op.create_index(op.f("ix_invitation_groups_group_id"), "invitation_groups", ["group_id"])
    op.create_table(
        "build_groups",
        sa.Column("build_id", sa.String(length=32), nullable=False),
        sa.Column("group_id", sa.String(length=32), nullable=False),
        _fk("build_groups", "build_id", "builds", "CASCADE"),
        sa.PrimaryKeyConstraint("build_id", "group_id", name=op.f("pk_build_groups")),
    )
    op.create_index(op.f("ix_build_groups_group_id"), "build_groups", ["group_id"])
    op.create_table(
        "build_recipients",
        sa.Column("build_id", sa.String(length=32), nullable=False),
        sa.Column("email", sa.String(length=320), nullable=False),
        sa.Column("user_id", sa.String(length=32), nullable=True),
        _when("reached_at"),
        sa.Column("notify", sa.Boolean(), nullable=False),
        _when("notified_at", nullable=True),
        sa.Column("install_link_id", sa.String(length=32), nullable=True),
        _fk("build_recipients", "build_id", "builds", "CASCADE"),
        _fk("build_recipients", "user_id", "users", "CASCADE"),
        _fk("build_recipients", "install_link_id", "install_links", "SET NULL"),
        sa.PrimaryKeyConstraint("build_id", "email", name=op.f("pk_build_recipients")),
    )
    for column in ("email", "user_id", "install_link_id"):
        op.create_index(op.f(f"ix_build_recipients_{column}"), "build_recipients", [column])
    op.create_table(
        "install_events",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("build_id", sa.String(length=32), nullable=False),
        sa.Column("application_id", sa.String(length=32), nullable=False),
        sa.Column("kind", sa.String(length=20), nullable=False),
        sa.Column("user_id", sa.String(length=32), nullable=True),
        sa.Column("install_link_id", sa.String(length=32), nullable=True),
        sa.Column("platform", sa.String(length=16), nullable=False),
        _when("at"),
        _fk("install_events", "build_id", "builds", "CASCADE"),
        _fk("install_events", "application_id", "applications", "CASCADE"),
        _fk("install_events", "user_id", "users", "SET NULL"),
        _fk("install_events", "install_link_id", "install_links", "SET NULL"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_install_events")),
    )
    op.create_index("ix_install_events_build_id_at", "install_events", ["build_id", "at"])
    op.create_index(
        "ix_install_events_application_id_at", "install_events", ["application_id", "at"]
    )
    # What exists was seen by every member: it stays so.
    builds = sa.table("builds", sa.column("id"))
    build_groups = sa.table("build_groups", sa.column("build_id"), sa.column("group_id"))
    op.get_bind().execute(
        build_groups.insert().from_select(
            ["build_id", "group_id"], sa.select(builds.c.id, sa.literal(EVERYONE))
        )
    )


def downgrade() -> None:
    op.drop_index("ix_install_events_application_id_at", table_name="install_events")
    op.drop_index("ix_install_events_build_id_at", table_name="install_events")
    op.drop_table("install_events")
    for column in ("email", "user_id", "install_link_id"):
        op.drop_index(op.f(f"ix_build_recipients_{column}"), table_name="build_recipients")
    op.drop_table("build_recipients")
    op.drop_index(op.f("ix_build_groups_group_id"), table_name="build_groups")
    op.drop_table("build_groups")
    op.drop_index(op.f("ix_invitation_groups_group_id"), table_name="invitation_groups")
    op.drop_table("invitation_groups")
    op.drop_index(op.f("ix_group_testers_user_id"), table_name="group_testers")
    op.drop_table("group_testers")
    op.drop_table("tester_groups")
    with op.batch_alter_table("applications") as batch:
        batch.drop_column("install_link_days")
        batch.drop_column("auto_distribute_groups")

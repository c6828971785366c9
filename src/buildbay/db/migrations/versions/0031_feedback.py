"""Tester feedback (issue 38): `feedback` on a build, its re-encoded `feedback_screenshots`
and the team's `feedback_comments`; who may send it (`applications.feedback_mode`), and a
member's wish for a mail per feedback (`project_members.feedback_mail`).

Revision ID: 0031
Revises: 0026
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0031"
down_revision: str | None = "0026"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "feedback",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("project_id", sa.String(length=32), nullable=False),
        sa.Column("application_id", sa.String(length=32), nullable=False),
        sa.Column("build_id", sa.String(length=32), nullable=False),
        sa.Column("tester_id", sa.String(length=32), nullable=True),
        sa.Column("reporter_email", sa.String(length=320), nullable=False),
        sa.Column("category", sa.String(length=20), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("context", sa.JSON(), nullable=True),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("assignee_id", sa.String(length=32), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["project_id"], ["projects.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["application_id"], ["applications.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["build_id"], ["builds.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["tester_id"], ["users.id"], ondelete="SET NULL"),
        sa.ForeignKeyConstraint(["assignee_id"], ["users.id"], ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_feedback_project_id_id", "feedback", ["project_id", "id"])
    op.create_index("ix_feedback_application_id_id", "feedback", ["application_id", "id"])
    op.create_index("ix_feedback_build_id_id", "feedback", ["build_id", "id"])
    op.create_table(
        "feedback_screenshots",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("feedback_id", sa.String(length=32), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("storage_key", sa.String(length=512), nullable=False),
        sa.Column("content_type", sa.String(length=40), nullable=False),
        sa.Column("width", sa.Integer(), nullable=False),
        sa.Column("height", sa.Integer(), nullable=False),
        sa.Column("bytes", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(["feedback_id"], ["feedback.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("storage_key"),
    )
    op.create_index("ix_feedback_screenshots_feedback_id", "feedback_screenshots", ["feedback_id"])
    op.create_table(
        "feedback_comments",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("feedback_id", sa.String(length=32), nullable=False),
        sa.Column("author_id", sa.String(length=32), nullable=True),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["feedback_id"], ["feedback.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["author_id"], ["users.id"], ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(
        "ix_feedback_comments_feedback_id_id", "feedback_comments", ["feedback_id", "id"]
    )
    # Plain ADD COLUMN, not batch mode (see 0025).
    op.add_column(
        "applications",
        sa.Column(
            "feedback_mode", sa.String(length=20), nullable=False, server_default="testers-only"
        ),
    )
    op.add_column(
        "project_members",
        sa.Column("feedback_mail", sa.Boolean(), nullable=False, server_default=sa.false()),
    )


def downgrade() -> None:
    op.execute("ALTER TABLE project_members DROP COLUMN feedback_mail")
    op.execute("ALTER TABLE applications DROP COLUMN feedback_mode")
    op.drop_table("feedback_comments")
    op.drop_table("feedback_screenshots")
    op.drop_table("feedback")

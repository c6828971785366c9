"""The audit log (issue 41): `audit_entries`, one row per security-relevant change, with no
foreign keys (an entry outlives what it names) and one index per way it is listed. On
PostgreSQL a trigger refuses to change or delete an entry, but for the sweeper's retention
delete, which says so in its transaction (audit/retention.py).

Revision ID: 0044
Revises: 0043
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0044"
down_revision: str | None = "0043"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_INDEXES = (
    ("ix_audit_entries_project_id_id", ["project_id", "id"]),
    ("ix_audit_entries_actor_id_id", ["actor_id", "id"]),
    ("ix_audit_entries_subject_user_id_id", ["subject_user_id", "id"]),
    ("ix_audit_entries_at", ["at"]),
)


# The setting's name is audit/retention.py's RETENTION_SETTING (a migration keeps its own copy).
_APPEND_ONLY = (
    """
    CREATE FUNCTION audit_entries_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF TG_OP IN ('DELETE', 'TRUNCATE')
           AND current_setting('buildbay.audit_retention', true) = 'on' THEN
            RETURN OLD;
        END IF;
        RAISE EXCEPTION 'audit entries are never changed or deleted'
            USING ERRCODE = 'insufficient_privilege', DETAIL = TG_OP || ' refused';
    END
    $$
    """,
    """
    CREATE TRIGGER audit_entries_append_only BEFORE UPDATE OR DELETE ON audit_entries
        FOR EACH ROW EXECUTE FUNCTION audit_entries_append_only()
    """,
    """
    CREATE TRIGGER audit_entries_no_truncate BEFORE TRUNCATE ON audit_entries
        FOR EACH STATEMENT EXECUTE FUNCTION audit_entries_append_only()
    """,
)


def upgrade() -> None:
    op.create_table(
        "audit_entries",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("actor_kind", sa.String(length=16), nullable=False),
        sa.Column("actor_id", sa.String(length=32), nullable=True),
        sa.Column("actor_email", sa.String(length=320), nullable=True),
        sa.Column("action", sa.String(length=64), nullable=False),
        sa.Column("target_type", sa.String(length=32), nullable=True),
        sa.Column("target_id", sa.String(length=64), nullable=True),
        sa.Column("target_name", sa.String(length=500), nullable=True),
        sa.Column("project_id", sa.String(length=32), nullable=True),
        sa.Column("subject_user_id", sa.String(length=32), nullable=True),
        sa.Column("ip", sa.String(length=64), nullable=True),
        sa.Column("user_agent", sa.String(length=500), nullable=True),
        sa.Column("details", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    for name, columns in _INDEXES:
        op.create_index(name, "audit_entries", columns)
    if op.get_bind().dialect.name == "postgresql":
        for statement in _APPEND_ONLY:
            op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TABLE audit_entries")  # its triggers with it
        op.execute("DROP FUNCTION audit_entries_append_only()")
        return
    for name, _ in reversed(_INDEXES):
        op.drop_index(name, table_name="audit_entries")
    op.drop_table("audit_entries")

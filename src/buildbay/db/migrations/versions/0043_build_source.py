"""Where a build came from (issue 40): the commit, branch, tag, repository, CI run and pull
request verify was told of, and the indexes of the builds list's `?branch=` and `?commit=`.

Revision ID: 0043
Revises: 0042
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0043"
down_revision: str | None = "0042"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_COLUMNS = (
    ("source_commit", 64),
    ("source_branch", 255),
    ("source_tag", 255),
    ("source_repository", 500),
    ("source_ci_run_url", 2048),
    ("source_pull_request", 2048),
)


def upgrade() -> None:
    # In place on both databases (see 0035): a batch copy of `builds` on SQLite would drop the
    # table that install links, icons and channels point at.
    for name, length in _COLUMNS:
        op.add_column("builds", sa.Column(name, sa.String(length=length), nullable=True))
    op.create_index(
        "ix_builds_application_id_source_branch_id",
        "builds",
        ["application_id", "source_branch", "id"],
    )
    op.create_index(
        "ix_builds_application_id_source_commit", "builds", ["application_id", "source_commit"]
    )


def downgrade() -> None:
    op.drop_index("ix_builds_application_id_source_commit", table_name="builds")
    op.drop_index("ix_builds_application_id_source_branch_id", table_name="builds")
    for name, _ in reversed(_COLUMNS):
        op.execute(f"ALTER TABLE builds DROP COLUMN {name}")

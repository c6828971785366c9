"""jobs.lane: the jobs of one lane (a webhook endpoint's deliveries) take only a few of a
worker's places, so one slow receiver cannot hold up the others or the mail (issue 16)

The webhook jobs pending when this runs join their endpoint's lane.

Revision ID: 0014
Revises: 0013
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("lane", sa.String(length=64), nullable=True))
    # A pending delivery names the job that carries its next attempt. Read first, then set by
    # primary key: `webhook_deliveries.job_id` has no index, so an UPDATE with a subquery would
    # scan the deliveries once for each job of a backlog.
    bind = op.get_bind()
    carried = bind.execute(
        sa.text(
            "SELECT job_id, webhook_id FROM webhook_deliveries"
            " WHERE status = 'pending' AND job_id IS NOT NULL"
        )
    ).all()
    if carried:
        bind.execute(
            sa.text("UPDATE jobs SET lane = :lane WHERE id = :id AND status = 'pending'"),
            [{"id": job_id, "lane": webhook_id} for job_id, webhook_id in carried],
        )


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("lane")

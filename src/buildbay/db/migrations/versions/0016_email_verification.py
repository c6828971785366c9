"""users.email_verified_at: when the account proved it receives mail at its address (a
verification link, an accepted invitation or a password reset followed), null until then
(issue 34: accounts could be claimed before their owner arrived)

Accounts that already followed a password-reset link or accepted an invitation mailed to their
address proved it then: they start verified, as of that moment. The others start unverified.

Revision ID: 0016
Revises: 0015
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("users") as batch:
        batch.add_column(sa.Column("email_verified_at", sa.DateTime(timezone=True), nullable=True))
    op.execute(
        "UPDATE users SET email_verified_at = ("
        " SELECT MIN(proof.at) FROM ("
        "  SELECT user_id AS who, used_at AS at FROM password_resets WHERE used_at IS NOT NULL"
        "  UNION ALL"
        "  SELECT u.id AS who, i.accepted_at AS at FROM invitations i"
        "  JOIN users u ON u.email = i.email WHERE i.accepted_at IS NOT NULL"
        " ) AS proof WHERE proof.who = users.id)"
    )


def downgrade() -> None:
    # Not batch mode: on SQLite it copies the table and drops the old one, and dropping `users`
    # with foreign keys on deletes or empties every row that points at a user (members, tokens,
    # sessions, recipients). SQLite drops a plain column in place since 3.35, as PostgreSQL does.
    op.execute("ALTER TABLE users DROP COLUMN email_verified_at")

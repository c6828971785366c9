"""One person of a provider per account: a unique key on `sso_identities (issuer, user_id)`.

The rule "an account already linked to a person of the provider is not linked to a second one"
was a read followed by an insert (sso/signin.py): two first sign-ins of different subjects
with one address, at the same moment, could both link to the account. The key makes the
second insert fail, which the sign-in answers as a concurrent one.

A pair already linked twice (only that race made one) keeps its first link: the later ones are
dropped, and their people are refused at their next sign-in as linked to another.

Revision ID: 0050
Revises: 0049
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0050"
down_revision: str | None = "0049"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute(
        "DELETE FROM sso_identities WHERE EXISTS (SELECT 1 FROM sso_identities AS earlier"
        " WHERE earlier.issuer = sso_identities.issuer AND earlier.user_id = sso_identities.user_id"
        " AND (earlier.created_at < sso_identities.created_at"
        " OR (earlier.created_at = sso_identities.created_at"
        " AND earlier.subject < sso_identities.subject)))"
    )
    op.create_index(
        "uq_sso_identities_issuer_user_id", "sso_identities", ["issuer", "user_id"], unique=True
    )


def downgrade() -> None:
    op.drop_index("uq_sso_identities_issuer_user_id", table_name="sso_identities")

"""install_links.owner_id and build_recipients.direct: access follows membership (issue 34)

A personal install link names its person, so that it opens only while they can open the build;
a recipient row says whether the build was given to them by name (an e-mail), so that leaving
the only group it reached them through takes the build away.

Existing rows: a link a recipient row points at is that person's. A recipient row that no group
of its build explains today (the build went neither to `everyone` nor to a group they are in)
can only be an e-mail's, or the trace of a group they left before this revision: the two cannot
be told apart, so it stays visible as it was (direct). Rows a group explains are not direct:
leaving those groups from now on takes the build away.

Revision ID: 0017
Revises: 0016
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import sqlalchemy as sa
from alembic import op
from alembic.operations import BatchOperations

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


# What points at an install link (ON DELETE SET NULL). On SQLite, batch mode copies
# install_links and drops the old table, and with foreign keys on, the drop sets every one of
# these to NULL: they are read before and written back after.
_POINTERS = {
    "build_recipients": ("build_id", "email"),
    "install_events": ("id",),
}


@contextmanager
def _install_links_copied() -> Iterator[BatchOperations]:
    """A batch on install_links that keeps what points at its rows."""
    bind = op.get_bind()
    kept = {
        table: bind.execute(
            sa.text(f"SELECT {', '.join(keys)}, install_link_id FROM {table}"  # noqa: S608
                    " WHERE install_link_id IS NOT NULL")
        ).all()
        for table, keys in _POINTERS.items()
    }  # fmt: skip
    with op.batch_alter_table("install_links") as batch:
        yield batch
    for table, keys in _POINTERS.items():
        if kept[table]:
            where = " AND ".join(f"{key} = :{key}" for key in keys)
            bind.execute(
                sa.text(f"UPDATE {table} SET install_link_id = :link WHERE {where}"),  # noqa: S608
                [dict(zip((*keys, "link"), row, strict=True)) for row in kept[table]],
            )


def upgrade() -> None:
    with _install_links_copied() as batch:
        batch.add_column(sa.Column("owner_id", sa.String(length=32), nullable=True))
        batch.create_foreign_key(
            op.f("fk_install_links_owner_id_users"), "users", ["owner_id"], ["id"],
            ondelete="CASCADE",
        )  # fmt: skip
    with op.batch_alter_table("build_recipients") as batch:
        batch.add_column(
            sa.Column("direct", sa.Boolean(), server_default=sa.false(), nullable=False)
        )
    op.execute(
        "UPDATE install_links SET owner_id = (SELECT r.user_id FROM build_recipients r"
        " WHERE r.install_link_id = install_links.id)"
        " WHERE EXISTS (SELECT 1 FROM build_recipients r"
        " WHERE r.install_link_id = install_links.id)"
    )
    op.execute(
        "UPDATE build_recipients SET direct = TRUE WHERE NOT EXISTS ("
        "SELECT 1 FROM build_groups g WHERE g.build_id = build_recipients.build_id"
        " AND (g.group_id = 'everyone' OR g.group_id IN (SELECT t.group_id FROM group_testers t"
        " WHERE t.user_id = build_recipients.user_id)))"
    )


def downgrade() -> None:
    with op.batch_alter_table("build_recipients") as batch:
        batch.drop_column("direct")
    with _install_links_copied() as batch:
        batch.drop_constraint(op.f("fk_install_links_owner_id_users"), type_="foreignkey")
        batch.drop_column("owner_id")

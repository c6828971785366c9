"""Tester groups as membership changes: an accepted invitation joins the groups it was for; a
member who leaves the project leaves its groups."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import DateTime, String, delete, literal, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.sql.dml import Insert

from buildbay.db.base import Base
from buildbay.distribution.models import GroupTester, InvitationGroup, TesterGroup


def insert_of(db: AsyncSession, model: type[Base]) -> Insert:
    """An INSERT of the database's dialect, which knows ON CONFLICT DO NOTHING."""
    if db.get_bind().dialect.name == "sqlite":
        return sqlite.insert(model)
    return postgresql.insert(model)


async def insert_ignoring_duplicates(
    db: AsyncSession, model: type[Base], rows: Sequence[Mapping[str, Any]]
) -> None:
    """INSERT the rows, leaving out those whose key exists (or is being inserted by a
    concurrent transaction that then commits)."""
    if rows:
        statement = insert_of(db, model).on_conflict_do_nothing()  # type: ignore[attr-defined]
        await db.execute(statement, [dict(row) for row in rows])


async def join_invited_groups(
    db: AsyncSession, invitation_id: str, user_id: str, now: datetime
) -> None:
    """The groups an accepted invitation was for, joined by the user who accepted it."""
    joined = select(
        InvitationGroup.group_id,
        literal(user_id, String()),
        literal(now, DateTime(timezone=True)),
    ).where(InvitationGroup.invitation_id == invitation_id)
    statement = insert_of(db, GroupTester).from_select(["group_id", "user_id", "added_at"], joined)
    await db.execute(statement.on_conflict_do_nothing())  # type: ignore[attr-defined]


async def leave_groups(db: AsyncSession, project_id: str, user_id: str) -> None:
    """The user's place in the project's groups, gone with their membership (were they added
    again, they would not be back in the old groups)."""
    await db.execute(
        delete(GroupTester).where(
            GroupTester.user_id == user_id,
            GroupTester.group_id.in_(
                select(TesterGroup.id).where(TesterGroup.project_id == project_id)
            ),
        )
    )

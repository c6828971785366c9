"""The layer's own promise: what a test writes, even committed, is gone before the next one."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.auth.models import User
from buildbay.db.engine import finish
from tests.services.conftest import Given


@pytest.mark.parametrize("turn", [1, 2])
async def test_each_test_starts_from_an_empty_database(
    db: AsyncSession, given: Given, turn: int
) -> None:
    assert await db.scalar(select(func.count(User.id))) == 0

    await given.user("the.same@example.com")  # a unique e-mail: the second turn would clash
    await finish(db, ok=True)

    assert await db.scalar(select(func.count(User.id))) == 1

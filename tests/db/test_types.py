"""Timestamps come back from either database as the aware UTC datetimes that went in, and the
API writes them in whole seconds with a Z."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from fastapi import FastAPI
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from buildbay.clock import utc_whole_seconds
from buildbay.projects.models import Project
from buildbay.projects.schemas import Project as ProjectBody


@pytest.mark.parametrize(
    "written",
    [
        datetime(2026, 11, 22, 4, 19, 53, tzinfo=UTC),
        datetime(2026, 11, 22, 4, 19, 53, 123456, tzinfo=UTC),
        datetime(2026, 11, 22, 6, 19, 53, 5, tzinfo=timezone(timedelta(hours=2))),
    ],
    ids=["whole seconds", "microseconds", "another zone"],
)
async def test_a_timestamp_reads_back_as_the_same_instant_in_utc(
    app: FastAPI, written: datetime
) -> None:
    sessions: async_sessionmaker[AsyncSession] = app.state.ctx.sessions
    async with sessions() as db:
        db.add(Project(id="p", name="p", created_at=written, updated_at=written))
        await db.commit()
    async with sessions() as db:
        read = (await db.scalars(select(Project.created_at))).one()
    assert read == written
    assert read.tzinfo is UTC


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (datetime(2026, 11, 22, 4, 19, 53, tzinfo=UTC), "2026-11-22T04:19:53Z"),
        (datetime(2026, 11, 22, 4, 19, 53, 999999, tzinfo=UTC), "2026-11-22T04:19:53Z"),
        (datetime(2026, 11, 22, 4, 19, 53), "2026-11-22T04:19:53Z"),  # naive: taken as UTC
        (
            datetime(2026, 11, 22, 5, 19, 53, 1, tzinfo=timezone(timedelta(hours=1))),
            "2026-11-22T04:19:53Z",
        ),
    ],
)
def test_the_api_writes_timestamps_in_whole_utc_seconds(value: datetime, expected: str) -> None:
    assert utc_whole_seconds(value).tzinfo is UTC
    body = ProjectBody(id="p", name="p", applications_count=0, created_at=value, updated_at=value)
    assert body.model_dump(mode="json", by_alias=True)["createdAt"] == expected
    assert f'"createdAt":"{expected}"' in body.model_dump_json(by_alias=True)

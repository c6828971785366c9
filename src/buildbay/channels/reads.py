"""Channels as read (db/reads.py): records, the queries that give them, and which channels a
build is published to."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, func, select

from buildbay.builds.enums import BuildStatus
from buildbay.builds.models import Build, BuildChannel, Channel
from buildbay.db.reads import Reads, RecordOf
from buildbay.errors import NotFound

DEFAULT_CHANNEL = "default"


@dataclass(frozen=True, slots=True)
class ChannelRecord:
    id: str
    application_id: str
    name: str
    created_at: datetime


CHANNEL = RecordOf(ChannelRecord, Channel)


@dataclass(frozen=True, slots=True)
class ChannelView:
    channel: ChannelRecord
    builds_count: int
    latest_build_id: str | None


# Built once: composing a statement per request costs more than the database takes to run it.
_VIEWS = select(
    *CHANNEL.columns,
    select(func.count(BuildChannel.build_id))
    .join(Build, Build.id == BuildChannel.build_id)
    .where(BuildChannel.channel_id == Channel.id, Build.status == BuildStatus.READY)
    .scalar_subquery()
    .label("builds_count"),
    select(func.max(BuildChannel.build_id))
    .join(Build, Build.id == BuildChannel.build_id)
    .where(BuildChannel.channel_id == Channel.id, Build.status == BuildStatus.READY)
    .scalar_subquery()
    .label("latest_build_id"),
)
_VIEWS_OF_APPLICATION = _VIEWS.where(
    Channel.application_id == bindparam("application_id")
).order_by(Channel.name)
_VIEW = _VIEWS.where(
    Channel.application_id == bindparam("application_id"), Channel.id == bindparam("channel_id")
)
_CHANNELS_BY_NAME = select(*CHANNEL.columns).where(
    Channel.application_id == bindparam("application_id"),
    Channel.name.in_(bindparam("names", expanding=True)),
)


def _view(row: Any) -> ChannelView:
    return ChannelView(CHANNEL.of(row), int(row["builds_count"] or 0), row["latest_build_id"])


def channel_not_found() -> NotFound:
    return NotFound("No channel with this id in the application", code="channel_not_found")


async def channels_of(reads: Reads, application_id: str) -> list[ChannelView]:
    """Every channel of the application, by name."""
    rows = await reads.all(_VIEWS_OF_APPLICATION, {"application_id": application_id})
    return [_view(row) for row in rows]


async def channel_view(reads: Reads, application_id: str, channel_id: str) -> ChannelView:
    row = await reads.first(_VIEW, {"application_id": application_id, "channel_id": channel_id})
    if row is None:
        raise channel_not_found()
    return _view(row)


async def channels_named(
    reads: Reads, application_id: str, names: list[str]
) -> dict[str, ChannelRecord]:
    """The application's channels of these names, by name (missing ones are left out)."""
    if not names:
        return {}
    rows = await reads.all(_CHANNELS_BY_NAME, {"application_id": application_id, "names": names})
    return {row["name"]: CHANNEL.of(row) for row in rows}

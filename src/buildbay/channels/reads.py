"""Channels as read (db/reads.py): records, the queries that give them, and which channels a
build is published to."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, func, select

from buildbay.builds.enums import BuildStatus
from buildbay.builds.models import Build, BuildChannel, Channel
from buildbay.channels.names import is_channel_name
from buildbay.db.reads import Reads, RecordOf
from buildbay.distribution.visibility import DISTRIBUTED_TO_VIEWER, Viewer, viewer_params
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


def _ready_on_channel(column: Any, *seen: Any) -> Any:
    """`column` (an aggregate) over the channel's ready builds that `seen` (conditions on the
    build) lets through."""
    return (
        select(column)
        .select_from(BuildChannel)
        .join(Build, Build.id == BuildChannel.build_id)
        .where(BuildChannel.channel_id == Channel.id, Build.status == BuildStatus.READY, *seen)
        .scalar_subquery()
    )


def _views(*seen: Any) -> Any:
    return select(
        *CHANNEL.columns,
        _ready_on_channel(func.count(Build.id), *seen).label("builds_count"),
        _ready_on_channel(func.max(Build.id), *seen).label("latest_build_id"),
    )


# Built once: composing a statement per request costs more than the database takes to run it.
# A tester counts only the builds distributed to them (distribution/visibility.py).
_VIEWS = _views()
_VIEWS_SEEN = _views(DISTRIBUTED_TO_VIEWER)
_BY_APPLICATION = Channel.application_id == bindparam("application_id")
_VIEWS_OF_APPLICATION = _VIEWS.where(_BY_APPLICATION).order_by(Channel.name)
_VIEWS_OF_APPLICATION_SEEN = _VIEWS_SEEN.where(_BY_APPLICATION).order_by(Channel.name)
_VIEW = _VIEWS.where(_BY_APPLICATION, Channel.id == bindparam("channel_id"))
_CHANNELS_BY_NAME = select(*CHANNEL.columns).where(
    Channel.application_id == bindparam("application_id"),
    Channel.name.in_(bindparam("names", expanding=True)),
)


def _view(row: Any) -> ChannelView:
    return ChannelView(CHANNEL.of(row), int(row["builds_count"] or 0), row["latest_build_id"])


def channel_not_found() -> NotFound:
    return NotFound("No channel with this id in the application", code="channel_not_found")


async def channels_of(
    reads: Reads, application_id: str, viewer: Viewer | None = None
) -> list[ChannelView]:
    """Every channel of the application, by name; its count and newest build of those given
    to `viewer` (a tester), or of all its ready builds (None: a developer or above)."""
    if viewer is None:
        rows = await reads.all(_VIEWS_OF_APPLICATION, {"application_id": application_id})
    else:
        params = {"application_id": application_id, **viewer_params(viewer)}
        rows = await reads.all(_VIEWS_OF_APPLICATION_SEEN, params)
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
    names = [name for name in names if is_channel_name(name)]
    if not names:
        return {}
    rows = await reads.all(_CHANNELS_BY_NAME, {"application_id": application_id, "names": names})
    return {row["name"]: CHANNEL.of(row) for row in rows}

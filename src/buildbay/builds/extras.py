"""What the API shows of each build beside its own row: the release channels it is published to
and how many times it was downloaded, for a page of builds in one statement (two statements
cost a round trip and SQLAlchemy's per-statement work each, on every read of a build)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import bindparam, func, select

from buildbay.builds.models import Build, BuildChannel, Channel
from buildbay.db.reads import Reads
from buildbay.distribution.models import InstallEvent, InstallEventKind

_DOWNLOADS = (
    select(func.count())
    .where(InstallEvent.build_id == Build.id, InstallEvent.kind == InstallEventKind.DOWNLOAD)
    .scalar_subquery()
)
# Channel names are [a-z0-9._-] (channels/schemas.py): a comma cannot be part of one.
_CHANNELS = (
    select(func.aggregate_strings(Channel.name, ","))
    .select_from(BuildChannel)
    .join(Channel, Channel.id == BuildChannel.channel_id)
    .where(BuildChannel.build_id == Build.id)
    .scalar_subquery()
)
_EXTRAS = select(Build.id, _DOWNLOADS.label("downloads"), _CHANNELS.label("channels")).where(
    Build.id.in_(bindparam("ids", expanding=True))
)


@dataclass(frozen=True, slots=True)
class BuildExtras:
    channels: list[str]  # sorted
    downloads: int


NONE = BuildExtras([], 0)


async def build_extras(reads: Reads, build_ids: list[str]) -> dict[str, BuildExtras]:
    """Each build's channels and download count, by id (a build gone meanwhile is left out)."""
    if not build_ids:
        return {}
    rows = await reads.all(_EXTRAS, {"ids": build_ids})
    return {
        row["id"]: BuildExtras(
            sorted(row["channels"].split(",")) if row["channels"] else [],
            int(row["downloads"] or 0),
        )
        for row in rows
    }

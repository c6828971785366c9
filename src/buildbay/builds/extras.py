"""What the API shows of each build beside its own row: the release channels it is published to,
how many times it was downloaded, its live install link, a ready build of the same version
code with other bytes (a warning: builds/duplicates.py) and how many of its testers' feedback
is still `new` (feedback/), for a page of builds in one
statement (each statement more cost a round trip and SQLAlchemy's per-statement work, on every
read of a build: docs/performance.md)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ScalarSelect, String, and_, bindparam, cast, func, select
from sqlalchemy.engine import RowMapping
from sqlalchemy.orm import InstrumentedAttribute, aliased

from buildbay.builds.enums import BuildStatus
from buildbay.builds.models import Build, BuildChannel, Channel, InstallLink
from buildbay.db.reads import Reads
from buildbay.distribution.models import InstallEvent, InstallEventKind
from buildbay.feedback.enums import FeedbackStatus
from buildbay.feedback.models import Feedback

_DOWNLOADS = (
    select(func.count())
    .where(InstallEvent.build_id == Build.id, InstallEvent.kind == InstallEventKind.DOWNLOAD)
    .scalar_subquery()
)
# Along the index on feedback (build_id, id): a build without feedback costs one index probe.
_NEW_FEEDBACK = (
    select(func.count())
    .where(Feedback.build_id == Build.id, Feedback.status == FeedbackStatus.NEW)
    .scalar_subquery()
)
# Each channel as `name:percent` (its rollout): channel names are [a-z0-9._-]
# (channels/schemas.py), so neither a comma nor a colon can be part of one.
_CHANNELS = (
    select(
        func.aggregate_strings(
            Channel.name.concat(":").concat(cast(BuildChannel.rollout_percent, String)), ","
        )
    )
    .select_from(BuildChannel)
    .join(Channel, Channel.id == BuildChannel.channel_id)
    .where(BuildChannel.build_id == Build.id)
    .scalar_subquery()
)

# The newest other ready build of the application with the build's version code and other
# bytes (none for a build without a version code: NULL equals nothing). Along the index on
# (application_id, version_code, id).
_OTHER = aliased(Build)
_SAME_VERSION = (
    select(_OTHER.id)
    .where(
        _OTHER.application_id == Build.application_id,
        _OTHER.version_code == Build.version_code,
        _OTHER.status == BuildStatus.READY,
        _OTHER.id != Build.id,
        _OTHER.sha256 != Build.sha256,
    )
    .order_by(_OTHER.id.desc())
    .limit(1)
    .scalar_subquery()
)

# A link a member shares and that still opens, at the time bound as `now`: never a personal
# link (a distribution mail's, a tester's own: opens through those are that person's, and only
# they may use it), so that a build's installUrl is never someone's own link.
SHARED_AND_LIVE = and_(
    InstallLink.revoked_at.is_(None),
    InstallLink.expires_at > bindparam("now"),
    InstallLink.owner_id.is_(None),
)


def _live_link(column: InstrumentedAttribute[Any]) -> ScalarSelect[Any]:
    """A column of the build's newest shared live link."""
    return (
        select(column)
        .where(InstallLink.build_id == Build.id, SHARED_AND_LIVE)
        .order_by(InstallLink.id.desc())
        .limit(1)
        .scalar_subquery()
    )


# The build's newest shared live link, beside its own columns (the update check's offer).
LIVE_LINK_COLUMNS = (
    _live_link(InstallLink.id).label("x_link_id"),
    _live_link(InstallLink.expires_at).label("x_link_expires_at"),
)
# Beside a build's own columns, in the statement that reads it (BuildReads.shown, shown_page),
# or alone by id (build_extras); `now` is a parameter of the statement.
EXTRA_COLUMNS = (
    _DOWNLOADS.label("x_downloads"),
    _CHANNELS.label("x_channels"),
    *LIVE_LINK_COLUMNS,
    _SAME_VERSION.label("x_same_version"),
    _NEW_FEEDBACK.label("x_new_feedback"),
)
_EXTRAS = select(Build.id, *EXTRA_COLUMNS).where(Build.id.in_(bindparam("ids", expanding=True)))


@dataclass(frozen=True, slots=True)
class LiveLink:
    id: str
    expires_at: datetime


@dataclass(frozen=True, slots=True)
class BuildExtras:
    channels: list[str]  # sorted
    rollouts: dict[str, int]  # each channel's rollout percentage, by name
    downloads: int
    link: LiveLink | None  # the newest live shared install link, if any
    # The newest other ready build of the same version code with other bytes, if any.
    same_version: str | None = None
    new_feedback: int = 0  # its feedback still `new`


NONE = BuildExtras([], {}, 0, None)


def live_link_of(row: RowMapping) -> LiveLink | None:
    """The live link of a row read with LIVE_LINK_COLUMNS (or EXTRA_COLUMNS)."""
    link_id = row["x_link_id"]
    return LiveLink(link_id, row["x_link_expires_at"]) if link_id else None


def rollouts_of(aggregated: str | None) -> dict[str, int]:
    """`beta:25,default:100` as {"beta": 25, "default": 100}."""
    if not aggregated:
        return {}
    pairs = (item.rpartition(":") for item in aggregated.split(","))
    return {name: int(percent) for name, _, percent in sorted(pairs)}


def extras_of(row: RowMapping) -> BuildExtras:
    """The extras of a row read with EXTRA_COLUMNS."""
    rollouts = rollouts_of(row["x_channels"])
    return BuildExtras(
        sorted(rollouts),
        rollouts,
        int(row["x_downloads"] or 0),
        live_link_of(row),
        row["x_same_version"],
        int(row["x_new_feedback"] or 0),
    )


async def build_extras(reads: Reads, build_ids: list[str], now: datetime) -> dict[str, BuildExtras]:
    """Each build's channels, download count and live link, by id (a build gone meanwhile is
    left out)."""
    if not build_ids:
        return {}
    rows = await reads.all(_EXTRAS, {"ids": build_ids, "now": now})
    return {row["id"]: extras_of(row) for row in rows}

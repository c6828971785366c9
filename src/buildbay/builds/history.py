"""A build's history: what was done to it, by whom and when (`build_events`), recorded in the
unit of work that did it and shown on the console's build page. General on purpose: a kind
and a JSON detail per event; the first kind is a change of a channel's rollout percentage.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, select
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.builds.models import BuildEvent
from buildbay.db.reads import Reads
from buildbay.ids import new_id

HISTORY_SHOWN = 100  # the newest events the build page shows


class EventKind(enum.StrEnum):
    # detail: {"channel": name, "from": percent or None (newly published), "to": percent}
    ROLLOUT_CHANGED = "rollout_changed"


@dataclass(frozen=True, slots=True)
class BuildEventRecord:
    id: str
    at: datetime
    actor_id: str | None
    kind: str
    detail: dict[str, Any]


async def record(
    db: AsyncSession,
    build_id: str,
    at: datetime,
    actor_id: str | None,
    kind: EventKind,
    detail: dict[str, Any],
) -> None:
    db.add(
        BuildEvent(
            id=new_id("bev"), build_id=build_id, at=at, actor_id=actor_id, kind=kind.value,
            detail=detail,
        )
    )  # fmt: skip


_EVENTS = (
    select(BuildEvent.id, BuildEvent.at, BuildEvent.actor_id, BuildEvent.kind, BuildEvent.detail)
    .where(BuildEvent.build_id == bindparam("build_id"))
    .order_by(BuildEvent.id.desc())
    .limit(HISTORY_SHOWN)
)


async def history_of(reads: Reads, build_id: str) -> list[BuildEventRecord]:
    """The build's newest events, newest first."""
    rows = await reads.all(_EVENTS, {"build_id": build_id})
    return [
        BuildEventRecord(row["id"], row["at"], row["actor_id"], row["kind"], row["detail"] or {})
        for row in rows
    ]


def said(event: BuildEventRecord) -> str:
    """The event in a sentence (without who and when), for people."""
    detail = event.detail
    if event.kind == EventKind.ROLLOUT_CHANGED:
        channel, before, after = detail.get("channel"), detail.get("from"), detail.get("to")
        if before is None:
            return f"Published to {channel} for {after}% of its installs"
        verb = "Raised" if after > before else "Lowered"
        return f"{verb} the rollout on {channel} from {before}% to {after}%"
    return event.kind.replace("_", " ").capitalize()

"""What a release channel offers the apps that follow it: the one rule that the update check
(updates/check.py) and the desktop updaters' feeds (feeds/) both read builds by.

A build is offered on a channel when it is published to it, `ready` (verified: a pending
upload, one still checked in the background or one that failed is not; a deleted build has no
row, and an unfinished upload past its `expires_at` is swept), and distributed to `everyone`:
an update key ships inside every installed copy, so what it offers, it offers to every tester
(docs/updates.md, "Who is offered what").
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Select, bindparam, select
from sqlalchemy.sql.elements import ColumnElement

from buildbay.builds.enums import BuildStatus
from buildbay.builds.models import Build, BuildChannel, Channel
from buildbay.distribution.visibility import DISTRIBUTED_TO_EVERYONE


def offered_on_channel(*columns: Any) -> Select[Any]:
    """`columns` of the builds offered on a channel (`application_id` and `channel`, its
    name, bound); BuildChannel's columns (`rollout_percent`) may be among them."""
    return (
        select(*columns)
        .select_from(Build)
        .join(BuildChannel, BuildChannel.build_id == Build.id)
        .join(Channel, Channel.id == BuildChannel.channel_id)
        .where(*OFFERED)
    )


OFFERED: tuple[ColumnElement[bool], ...] = (
    Channel.application_id == bindparam("application_id"),
    Channel.name == bindparam("channel"),
    Build.status == BuildStatus.READY,
    DISTRIBUTED_TO_EVERYONE,
)

# Whether the application has a channel of this name (`application_id`, `channel` bound): an
# empty answer on an unknown channel is a 404 that says so, not "nothing new".
CHANNEL = select(Channel.id).where(
    Channel.application_id == bindparam("application_id"), Channel.name == bindparam("channel")
)

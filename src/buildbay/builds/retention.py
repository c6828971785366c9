"""Retention: which ready builds an application's rule deletes now. One reckoning, for the
sweeper that deletes them (sweeper.py) and for the preview shown before a rule is saved (the
API's `retention/preview`, the console's confirmation): what the preview names is what the
next round deletes, unless builds come or go meanwhile.

A ready build goes when it is beyond the newest `keep_last` or was verified more than
`keep_days` days ago, unless it is protected: the application's newest ready build always is;
by default (`protect_groups`, `protect_channels`) so are the newest build distributed to each
tester group and the newest build published to each release channel (and the newest one there
at 100%, for the installs that a newer build's staged rollout has not reached yet), so that no
group is left without the build it was last given, and no channel without the build its update
check offers.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import bindparam, select

from buildbay.applications.records import ApplicationRecord
from buildbay.builds.enums import BuildStatus
from buildbay.builds.models import Build, BuildChannel
from buildbay.builds.records import ReadyBuild, RetentionPolicy
from buildbay.db.reads import Reads
from buildbay.distribution.models import BuildGroup, BuildRecipient


def rule_of(application: ApplicationRecord) -> RetentionPolicy:
    return RetentionPolicy(
        application.retention_keep_last,
        application.retention_keep_days,
        application.retention_protect_groups,
        application.retention_protect_channels,
    )


_OF_APPLICATION = Build.application_id == bindparam("application_id")
_READY = Build.status == BuildStatus.READY
_READY_BUILDS = (
    select(Build.id, Build.file_name, Build.metadata_.label("metadata"), Build.verified_at)
    .where(_OF_APPLICATION, _READY)
    .order_by(Build.id.desc())
)
_GROUPS = (
    select(BuildGroup.build_id, BuildGroup.group_id)
    .join(Build, Build.id == BuildGroup.build_id)
    .where(_OF_APPLICATION, _READY)
)
_CHANNELS = (
    select(BuildChannel.build_id, BuildChannel.channel_id, BuildChannel.rollout_percent)
    .join(Build, Build.id == BuildChannel.build_id)
    .where(_OF_APPLICATION, _READY)
)
_RECIPIENTS = (
    select(BuildRecipient.build_id)
    .join(Build, Build.id == BuildRecipient.build_id)
    .where(_OF_APPLICATION, _READY)
    .distinct()
)


async def ready_builds(reads: Reads, application_id: str) -> list[ReadyBuild]:
    """The application's ready builds, newest first, with their groups and channels."""
    params = {"application_id": application_id}
    groups: dict[str, set[str]] = {}
    for row in await reads.all(_GROUPS, params):
        groups.setdefault(row["build_id"], set()).add(row["group_id"])
    channels: dict[str, set[str]] = {}
    full: dict[str, set[str]] = {}
    for row in await reads.all(_CHANNELS, params):
        channels.setdefault(row["build_id"], set()).add(row["channel_id"])
        if row["rollout_percent"] >= 100:
            full.setdefault(row["build_id"], set()).add(row["channel_id"])
    recipients = {row["build_id"] for row in await reads.all(_RECIPIENTS, params)}
    return [
        ReadyBuild(
            id=row["id"],
            file_name=row["file_name"],
            metadata=row["metadata"],
            verified_at=row["verified_at"],
            groups=frozenset(groups.get(row["id"], ())),
            channels=frozenset(channels.get(row["id"], ())),
            distributed=row["id"] in groups or row["id"] in recipients,
            full_channels=frozenset(full.get(row["id"], ())),
        )
        for row in await reads.all(_READY_BUILDS, params)
    ]


def protected(builds: list[ReadyBuild], rule: RetentionPolicy) -> set[str]:
    """The ids the rule keeps whatever it says (`builds` newest first)."""
    kept = {builds[0].id} if builds else set()
    newest_of: dict[tuple[str, str], str] = {}
    for build in builds:
        if rule.protect_groups:
            for group in build.groups:
                newest_of.setdefault(("group", group), build.id)
        if rule.protect_channels:
            for channel in build.channels:
                newest_of.setdefault(("channel", channel), build.id)
            for channel in build.full_channels:
                newest_of.setdefault(("channel at 100%", channel), build.id)
    return kept | set(newest_of.values())


def doomed(builds: list[ReadyBuild], rule: RetentionPolicy, now: datetime) -> list[ReadyBuild]:
    """Those of `builds` (newest first) that `rule` deletes now, newest first."""
    if not rule.deletes_anything:
        return []
    oldest_kept = now - timedelta(days=rule.keep_days) if rule.keep_days is not None else None
    spared = protected(builds, rule)
    return [
        build
        for position, build in enumerate(builds)
        if build.id not in spared
        and (
            (rule.keep_last is not None and position >= rule.keep_last)
            or (
                oldest_kept is not None
                and build.verified_at is not None
                and build.verified_at < oldest_kept
            )
        )
    ]


async def preview(
    reads: Reads, application_id: str, rule: RetentionPolicy, now: datetime
) -> list[ReadyBuild]:
    """What `rule` would delete now, were it the application's."""
    return doomed(await ready_builds(reads, application_id), rule, now)

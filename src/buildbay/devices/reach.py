"""Which enrolled devices a build installs on: its profile's UDIDs (build_profile_devices,
stored at verify) against the devices of the project's members.

`build_reach` and `person_reach` answer every device at once, for a page about one build or one
person (the console's, the install page's); the API answers a project of any size with
`reach_counts` and `reach_page`, whose cost does not grow with the page's place (at 10,000
devices, every device at once took half a second: docs/performance.md)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import and_, bindparam, exists, func, select
from sqlalchemy.engine import RowMapping

from buildbay.auth.models import User
from buildbay.db.reads import Query, Reads, RecordOf
from buildbay.devices.models import BuildProfileDevice, Device
from buildbay.devices.records import (
    DeviceRecord,
    DeviceTester,
    ProfileScope,
    Reach,
    ReachCounts,
    ReachedDevice,
)
from buildbay.ids import split_page
from buildbay.projects.models import ProjectMember

DEVICE = RecordOf(DeviceRecord, Device)
# The member a device belongs to, read beside it (`tester_id`, `tester_email`, `tester_name`).
TESTER_COLUMNS = (
    User.id.label("tester_id"),
    User.email.label("tester_email"),
    User.name.label("tester_name"),
)

LISTED_TYPES = frozenset({"ad-hoc", "development"})
_ANY_TYPES = frozenset({"enterprise", "app-store"})


def profile_scope(file_name: str, metadata: dict[str, Any] | None) -> ProfileScope | None:
    """The scope of a build's profile, as its metadata says; None for a build that is not an
    .ipa. (`build_reach` says UNKNOWN, too, for a LISTED profile whose UDIDs were not stored:
    a build verified before devices were.)"""
    if not file_name.lower().endswith(".ipa"):
        return None
    provisioning = (metadata or {}).get("provisioning")
    kind = provisioning.get("type") if isinstance(provisioning, dict) else None
    if kind in LISTED_TYPES:
        return ProfileScope.LISTED
    if kind in _ANY_TYPES:
        return ProfileScope.ANY
    return ProfileScope.UNKNOWN


def tester_of(row: RowMapping) -> DeviceTester:
    return DeviceTester(row["tester_id"], row["tester_email"], row["tester_name"])


_IN_PROFILE = exists().where(
    BuildProfileDevice.build_id == bindparam("build_id"), BuildProfileDevice.udid == Device.udid
)
# A device of a member of the project (`project_id`), as a join's condition.
MEMBERS_DEVICE = and_(
    ProjectMember.user_id == Device.user_id, ProjectMember.project_id == bindparam("project_id")
)
# A member's devices, whether the build's profile lists each: one statement, the profile's
# primary key (build_id, udid) answering each device's lookup.
_MEMBERS_DEVICES = (
    select(*DEVICE.columns, *TESTER_COLUMNS, _IN_PROFILE.label("included"))
    .join(ProjectMember, MEMBERS_DEVICE)
    .join(User, User.id == Device.user_id)
    .order_by(Device.id)
)
_USERS_DEVICES = (
    select(*DEVICE.columns, _IN_PROFILE.label("included"))
    .where(Device.user_id == bindparam("user_id"))
    .order_by(Device.id)
)
# Whether verify stored any UDID of the build's profile (builds verified before devices were,
# in migration 0026, have none stored).
_PROFILE_STORED = select(
    exists().where(BuildProfileDevice.build_id == bindparam("build_id")).label("stored")
)


async def build_reach(
    reads: Reads,
    project_id: str,
    build_id: str,
    scope: ProfileScope | None,
) -> Reach | None:
    """The project's members' devices that the build's profile includes and misses, and the
    members they belong to; None for a build that is not an .ipa. A LISTED profile of which no
    UDID was stored is UNKNOWN: the build was verified before devices were."""
    if scope is None:
        return None
    if scope is not ProfileScope.LISTED:
        return Reach(scope, [], [])
    params = {"project_id": project_id, "build_id": build_id}
    rows = await reads.all(_MEMBERS_DEVICES, params)
    if not any(row["included"] for row in rows) and not await _profile_stored(reads, build_id):
        return Reach(ProfileScope.UNKNOWN, [], [])
    included, missing = _split(rows)
    testers = {row["tester_id"]: tester_of(row) for row in rows}
    return Reach(scope, included, missing, testers)


async def person_reach(
    reads: Reads, user_id: str, build_id: str, scope: ProfileScope | None
) -> tuple[list[DeviceRecord], list[DeviceRecord]]:
    """A person's enrolled devices that the build's profile includes, and those it misses
    (none of either unless the profile lists its devices, and its UDIDs were stored)."""
    if scope is not ProfileScope.LISTED:
        return [], []
    rows = await reads.all(_USERS_DEVICES, {"user_id": user_id, "build_id": build_id})
    if rows and not any(r["included"] for r in rows) and not await _profile_stored(reads, build_id):
        return [], []
    return _split(rows)


async def _profile_stored(reads: Reads, build_id: str) -> bool:
    return bool(await reads.scalar(_PROFILE_STORED, {"build_id": build_id}))


def _split(rows: Sequence[RowMapping]) -> tuple[list[DeviceRecord], list[DeviceRecord]]:
    included: list[DeviceRecord] = []
    missing: list[DeviceRecord] = []
    for row in rows:
        (included if row["included"] else missing).append(DEVICE.of(row))
    return included, missing


# -- a page at a time, for a project of any size (the API's) ------------------------------------

# The members' devices the profile lists, from the profile's side: for each of its UDIDs, a
# lookup of the unique UDID and of the membership's primary key (a profile lists at most a few
# hundred or thousand devices; the project may have many more).
_INCLUDED_IDS = (
    select(Device.id, Device.user_id)
    .select_from(BuildProfileDevice)
    .join(Device, Device.udid == BuildProfileDevice.udid)
    .join(ProjectMember, MEMBERS_DEVICE)
    .where(BuildProfileDevice.build_id == bindparam("build_id"))
)
_INCLUDED = _INCLUDED_IDS.subquery()
_COUNTS = select(
    func.count().label("included"),
    func.count(_INCLUDED.c.user_id.distinct()).label("testers_included"),
    select(func.count())
    .select_from(Device)
    .join(ProjectMember, MEMBERS_DEVICE)
    .scalar_subquery()
    .label("devices"),
    select(func.count())
    .select_from(ProjectMember)
    .where(
        ProjectMember.project_id == bindparam("project_id"),
        exists(select(Device.id).where(Device.user_id == ProjectMember.user_id)),
    )
    .scalar_subquery()
    .label("testers"),
    exists().where(BuildProfileDevice.build_id == bindparam("build_id")).label("stored"),
).select_from(_INCLUDED)
# A page's device ids, from the indexes alone (the membership's primary key, devices' (user_id,
# id)), sorted; then those devices' rows: sorting the ids of 10,000 devices costs a fraction of
# sorting their rows.
_PAGE_IDS = select(Device.id).join(ProjectMember, MEMBERS_DEVICE)
_REACHED = select(*DEVICE.columns, *TESTER_COLUMNS, _IN_PROFILE.label("included")).join(
    User, User.id == Device.user_id
)


def _reach_page_statement(only: bool | None, after: bool) -> Query:
    if only:  # from the profile's side, as the counts
        ids = _INCLUDED_IDS.with_only_columns(Device.id)
    else:
        ids = _PAGE_IDS if only is None else _PAGE_IDS.where(~_IN_PROFILE)
    if after:
        ids = ids.where(Device.id < bindparam("after_id"))
    return _REACHED.where(
        Device.id.in_(ids.order_by(Device.id.desc()).limit(bindparam("limit")))
    ).order_by(Device.id.desc())


# Built once, each (which devices, from a cursor or not): composing a statement per request
# costs more than SQLite takes to run it.
_REACH_PAGES = {
    (only, after): _reach_page_statement(only, after)
    for only in (None, True, False)
    for after in (False, True)
}


async def reach_counts(reads: Reads, project_id: str, build_id: str) -> ReachCounts | None:
    """How many of the members' devices a LISTED profile includes, in one statement; None if
    verify stored none of its UDIDs (a build verified before devices were: not known)."""
    row = await reads.first(_COUNTS, {"project_id": project_id, "build_id": build_id})
    assert row is not None  # aggregates: one row
    if not row["stored"]:
        return None
    return ReachCounts(
        int(row["devices"]), int(row["included"]), int(row["testers"]),
        int(row["testers_included"]),
    )  # fmt: skip


async def reach_page(
    reads: Reads,
    project_id: str,
    build_id: str,
    limit: int,
    after_id: str | None,
    only: bool | None = None,
) -> tuple[list[ReachedDevice], str | None]:
    """A page of the members' devices, the most recently enrolled first, each with whether the
    build's profile lists it; only those it lists (`only` True) or misses (False), if asked."""
    stmt = _REACH_PAGES[(only, after_id is not None)]
    params = {"project_id": project_id, "build_id": build_id, "limit": limit + 1}
    if after_id is not None:
        params["after_id"] = after_id
    rows = await reads.all(stmt, params)
    found = [ReachedDevice(DEVICE.of(row), tester_of(row), bool(row["included"])) for row in rows]
    return split_page(found, limit, lambda reached: reached.device.id)

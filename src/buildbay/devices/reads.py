"""A project's devices as its developers read them (db/reads.py): every enrolled device of the
project's members, a keyset page at a time, each with its tester and whether the newest ad-hoc
or development .ipa of each iOS application of the project installs on it.

A page costs three statements whatever its size or place: the applications' newest such builds,
the page of devices, and the page's UDIDs looked up in those builds' profiles (the primary key
of build_profile_devices, build id then UDID): no statement per device or per application.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, bindparam, exists, or_, select
from sqlalchemy.engine import RowMapping

from buildbay.applications.enums import Platform
from buildbay.applications.models import Application
from buildbay.auth.models import User
from buildbay.builds.enums import BuildStatus
from buildbay.builds.models import Build
from buildbay.db.reads import Query, Reads
from buildbay.devices.models import BuildProfileDevice, Device
from buildbay.devices.reach import (
    DEVICE,
    LISTED_TYPES,
    MEMBERS_DEVICE,
    TESTER_COLUMNS,
    tester_of,
)
from buildbay.devices.records import DeviceRecord, DeviceTester
from buildbay.ids import split_page
from buildbay.projects.models import ProjectMember

# The longest `?q=` taken (a device name is 100 characters at most, an e-mail 320).
MAX_SEARCH = 320


@dataclass(frozen=True, slots=True)
class LatestProfile:
    """An iOS application of the project and its newest ready ad-hoc or development .ipa
    (`build_id` None: it has none). `profile_stored`: verify stored the profile's UDIDs (not so
    for a build verified before devices were: which devices it includes is not known)."""

    application_id: str
    application_name: str
    build_id: str | None
    profile_stored: bool


@dataclass(frozen=True, slots=True)
class ListedDevice:
    """A device of the list, its tester, and whether each LatestProfile's build includes it
    (by application id; None where the application has no such build, or its profile is not
    known)."""

    device: DeviceRecord
    tester: DeviceTester
    in_profile: dict[str, bool | None]


@dataclass(frozen=True, slots=True)
class DevicePage:
    devices: list[ListedDevice]
    applications: list[LatestProfile]
    next_cursor: str | None


_PROVISIONING_TYPE = Build.metadata_[("provisioning", "type")].as_string()
# An application's newest ready .ipa whose profile lists its devices.
_NEWEST_LISTED = (
    select(Build.id)
    .where(
        Build.application_id == Application.id,
        Build.status == BuildStatus.READY,
        _PROVISIONING_TYPE.in_(sorted(LISTED_TYPES)),
    )
    .order_by(Build.id.desc())
    .limit(1)
    .correlate(Application)
    .scalar_subquery()
)
_APPLICATIONS = (
    select(
        Application.id.label("application_id"),
        Application.name.label("application_name"),
        _NEWEST_LISTED.label("build_id"),
    )
    .where(Application.project_id == bindparam("project_id"), Application.platform == Platform.IOS)
    .subquery()
)
# ... and whether verify stored the UDIDs of that build's profile.
_LATEST_PROFILES = select(
    _APPLICATIONS,
    exists().where(BuildProfileDevice.build_id == _APPLICATIONS.c.build_id).label("profile_stored"),
).order_by(_APPLICATIONS.c.application_id)
# A page of the devices of the project's members: its ids first, from the indexes alone (the
# membership's primary key, devices' (user_id, id)) and sorted, then their rows with their
# testers. Sorting the ids of 10,000 devices costs a fraction of sorting their rows.
_PAGE_IDS = select(Device.id).join(ProjectMember, MEMBERS_DEVICE)
_DEVICES = select(*DEVICE.columns, *TESTER_COLUMNS).join(User, User.id == Device.user_id)


def _page(ids: Query) -> Query:
    return _DEVICES.where(
        Device.id.in_(ids.order_by(Device.id.desc()).limit(bindparam("limit")))
    ).order_by(Device.id.desc())


# Built once: the pages without a search, the first and those after a cursor.
_FIRST_PAGE = _page(_PAGE_IDS)
_NEXT_PAGE = _page(_PAGE_IDS.where(Device.id < bindparam("after_id")))
_IN_PROFILES = select(BuildProfileDevice.build_id, BuildProfileDevice.udid).where(
    BuildProfileDevice.build_id.in_(bindparam("build_ids", expanding=True)),
    BuildProfileDevice.udid.in_(bindparam("udids", expanding=True)),
)


def _search(text: str) -> ColumnElement[bool]:
    """Devices whose name, model or UDID, or whose tester's e-mail or name, hold `text` in any
    case (`%` and `_` are matched as themselves)."""
    fields = (Device.name, Device.model, Device.udid, User.email, User.name)
    return or_(*(field.icontains(text, autoescape=True) for field in fields))


async def latest_profiles(reads: Reads, project_id: str) -> list[LatestProfile]:
    """The project's iOS applications, each with its newest ready ad-hoc or development .ipa,
    in the order they were created."""
    rows = await reads.all(_LATEST_PROFILES, {"project_id": project_id})
    return [
        LatestProfile(
            row["application_id"],
            row["application_name"],
            row["build_id"],
            bool(row["profile_stored"]),
        )
        for row in rows
    ]


async def project_devices(
    reads: Reads, project_id: str, limit: int, after_id: str | None, search: str | None
) -> DevicePage:
    """A page of the devices of the project's members, the most recently enrolled first (by
    id), from the cursor's device on; of those `search` finds, if given."""
    applications = await latest_profiles(reads, project_id)
    params: dict[str, Any] = {"project_id": project_id, "limit": limit + 1}
    if after_id is not None:
        params["after_id"] = after_id
    stmt = _FIRST_PAGE if after_id is None else _NEXT_PAGE
    if search:  # composed: each search its own statement
        ids = _PAGE_IDS.join(User, User.id == Device.user_id).where(_search(search))
        if after_id is not None:
            ids = ids.where(Device.id < bindparam("after_id"))
        stmt = _page(ids)
    rows = await reads.all(stmt, params)
    page, next_cursor = split_page(rows, limit, lambda row: str(row["id"]))
    listed = await _with_profiles(reads, page, applications)
    return DevicePage(listed, applications, next_cursor)


async def _with_profiles(
    reads: Reads, rows: Sequence[RowMapping], applications: list[LatestProfile]
) -> list[ListedDevice]:
    known = {a.build_id: a for a in applications if a.build_id is not None and a.profile_stored}
    hits: set[tuple[str, str]] = set()
    if rows and known:
        found = await reads.all(
            _IN_PROFILES,
            {"build_ids": sorted(known), "udids": sorted({row["udid"] for row in rows})},
        )
        hits = {(row["build_id"], row["udid"]) for row in found}
    listed = []
    for row in rows:
        device = DEVICE.of(row)
        in_profile = {
            a.application_id: ((a.build_id, device.udid) in hits if a.build_id in known else None)
            for a in applications
        }
        listed.append(ListedDevice(device, tester_of(row), in_profile))
    return listed


async def devices_after(
    reads: Reads, project_id: str, after_id: str | None, limit: int
) -> list[tuple[DeviceRecord, DeviceTester]]:
    """Up to `limit` devices of the project's members after `after_id`, the earliest enrolled
    first (by id): an export reads them a batch at a time."""
    ids = _PAGE_IDS if after_id is None else _PAGE_IDS.where(Device.id > after_id)
    stmt = _DEVICES.where(
        Device.id.in_(ids.order_by(Device.id).limit(bindparam("limit")))
    ).order_by(Device.id)
    rows = await reads.all(stmt, {"project_id": project_id, "limit": limit})
    return [(DEVICE.of(row), tester_of(row)) for row in rows]

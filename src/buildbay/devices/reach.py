"""Which enrolled devices a build installs on: its profile's UDIDs (build_profile_devices,
stored at verify) against the devices of the project's members."""

from __future__ import annotations

from typing import Any

from sqlalchemy import and_, bindparam, exists, select

from buildbay.db.reads import Reads, RecordOf
from buildbay.devices.models import BuildProfileDevice, Device
from buildbay.devices.records import DeviceRecord, ProfileScope, Reach
from buildbay.projects.models import ProjectMember

DEVICE = RecordOf(DeviceRecord, Device)

_LISTED_TYPES = frozenset({"ad-hoc", "development"})
_ANY_TYPES = frozenset({"enterprise", "app-store"})


def profile_scope(file_name: str, metadata: dict[str, Any] | None) -> ProfileScope | None:
    """The scope of a build's profile; None for a build that is not an .ipa."""
    if not file_name.lower().endswith(".ipa"):
        return None
    provisioning = (metadata or {}).get("provisioning")
    kind = provisioning.get("type") if isinstance(provisioning, dict) else None
    if kind in _LISTED_TYPES:
        return ProfileScope.LISTED
    if kind in _ANY_TYPES:
        return ProfileScope.ANY
    return ProfileScope.UNKNOWN


_IN_PROFILE = exists().where(
    BuildProfileDevice.build_id == bindparam("build_id"), BuildProfileDevice.udid == Device.udid
)
# A member's devices, whether the build's profile lists each: one statement, the profile's
# primary key (build_id, udid) answering each device's lookup.
_MEMBERS_DEVICES = (
    select(*DEVICE.columns, _IN_PROFILE.label("included"))
    .join(
        ProjectMember,
        and_(
            ProjectMember.user_id == Device.user_id,
            ProjectMember.project_id == bindparam("project_id"),
        ),
    )
    .order_by(Device.id)
)
_USERS_DEVICES = (
    select(*DEVICE.columns, _IN_PROFILE.label("included"))
    .where(Device.user_id == bindparam("user_id"))
    .order_by(Device.id)
)


async def build_reach(
    reads: Reads,
    project_id: str,
    build_id: str,
    scope: ProfileScope | None,
) -> Reach | None:
    """The project's members' devices that the build's profile includes and misses; None for a
    build that is not an .ipa."""
    if scope is None:
        return None
    if scope is not ProfileScope.LISTED:
        return Reach(scope, [], [])
    rows = await reads.all(_MEMBERS_DEVICES, {"project_id": project_id, "build_id": build_id})
    included = [DEVICE.of(row) for row in rows if row["included"]]
    missing = [DEVICE.of(row) for row in rows if not row["included"]]
    return Reach(scope, included, missing)


async def person_reach(
    reads: Reads, user_id: str, build_id: str, scope: ProfileScope | None
) -> tuple[list[DeviceRecord], list[DeviceRecord]]:
    """A person's enrolled devices that the build's profile includes, and those it misses
    (none of either unless the profile lists its devices)."""
    if scope is not ProfileScope.LISTED:
        return [], []
    rows = await reads.all(_USERS_DEVICES, {"user_id": user_id, "build_id": build_id})
    return (
        [DEVICE.of(row) for row in rows if row["included"]],
        [DEVICE.of(row) for row in rows if not row["included"]],
    )

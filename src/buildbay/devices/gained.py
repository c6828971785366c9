"""The enrolled devices a new build installs on that the application's previous ready build did
not: its profile lists them, the previous build's profile (known: its UDIDs were kept) did not.
The new-build mail tells each of their testers ("This build now installs on your iPhone")."""

from __future__ import annotations

from collections import defaultdict

from sqlalchemy import and_, bindparam, exists, select
from sqlalchemy.orm import aliased

from buildbay.builds.enums import BuildStatus
from buildbay.builds.models import Build
from buildbay.db.reads import Reads
from buildbay.devices.enums import DevicePlatform
from buildbay.devices.models import BuildProfileDevice, Device
from buildbay.devices.reach import DEVICE
from buildbay.devices.records import DeviceRecord

_PREVIOUS = (
    select(Build.id)
    .where(
        Build.application_id == bindparam("application_id"),
        Build.status == BuildStatus.READY,
        Build.id < bindparam("build_id"),  # ids sort by the time they were made
    )
    .order_by(Build.id.desc())
    .limit(1)
    .scalar_subquery()
)
_EARLIER = aliased(BuildProfileDevice)
# One statement for a whole distribution: as many rows as the new profile lists enrolled
# devices (Apple caps a profile at 100 of each kind), whoever is mailed.
_GAINED = (
    select(*DEVICE.columns)
    .join(
        BuildProfileDevice,
        and_(
            BuildProfileDevice.build_id == bindparam("build_id"),
            BuildProfileDevice.udid == Device.udid,
        ),
    )
    .where(
        Device.platform != DevicePlatform.MACOS,  # an .ipa does not go to a Mac over the air
        exists().where(_EARLIER.build_id == _PREVIOUS),
        ~exists().where(_EARLIER.build_id == _PREVIOUS, _EARLIER.udid == Device.udid),
    )
    .order_by(Device.user_id, Device.name, Device.id)
)


async def devices_gained(
    reads: Reads, application_id: str, build_id: str
) -> dict[str, list[DeviceRecord]]:
    """By their owner's user id, the enrolled devices that `build_id`'s profile lists and the
    previous ready build's did not; none when that build's devices are not known (an enterprise
    or App Store profile, one verified before profiles were kept) or when there is none."""
    rows = await reads.all(_GAINED, {"application_id": application_id, "build_id": build_id})
    gained: dict[str, list[DeviceRecord]] = defaultdict(list)
    for row in rows:
        device = DEVICE.of(row)
        gained[device.user_id].append(device)
    return dict(gained)

"""What an .ipa's install page says of the devices of the person viewing it (signed in, or the
person of a personal install link): which of theirs the build was not made for, said before
the Install button, and whether to offer to register the device in hand; and, on a list of
builds (the application's page), which were made for none of theirs."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import bindparam, exists, select, true

from buildbay.builds.models import Build
from buildbay.db.reads import Reads
from buildbay.devices.enums import DevicePlatform
from buildbay.devices.models import BuildProfileDevice, Device
from buildbay.devices.reach import DEVICE, person_reach
from buildbay.devices.records import DeviceRecord, ProfileScope


@dataclass(frozen=True, slots=True)
class ViewerDevices:
    """The viewer's iPhones and iPads that the build's profile includes and misses: those of
    the kind that opens the page (an iPhone's User-Agent says iPhone) when they have any, else
    all of them (the page cannot tell which one it is on). `register`: none of them is there,
    so the device in hand is offered to be registered."""

    included: list[DeviceRecord]
    missing: list[DeviceRecord]

    @property
    def register(self) -> bool:
        return not self.included and not self.missing


async def viewer_devices(
    reads: Reads,
    user_id: str,
    build_id: str,
    scope: ProfileScope | None,
    opened_on: str | None,
) -> ViewerDevices | None:
    """None unless the build's profile lists its devices (ad-hoc or development, and known).
    `opened_on`: "iPhone", "iPad" or "iPod" as the page's User-Agent says (builds/devices.py
    apple_model_of), None when it does not."""
    if scope is not ProfileScope.LISTED:
        return None
    included, missing = await person_reach(reads, user_id, build_id, scope)

    def shown(devices: list[DeviceRecord]) -> list[DeviceRecord]:
        # An .ipa installs on an iPhone, iPad or iPod touch, never over the air on a Mac.
        return _of_kind([d for d in devices if d.platform is not DevicePlatform.MACOS], opened_on)

    return ViewerDevices(shown(included), shown(missing))


# Each of a page's builds against each of the person's devices: whether its profile lists the
# device, and whether any of its UDIDs were stored (not so for a build verified before they
# were: its devices are not known). One statement for the page.
_BUILDS_AGAINST_DEVICES = (
    select(
        Build.id.label("build_id"),
        *DEVICE.columns,
        exists()
        .where(BuildProfileDevice.build_id == Build.id, BuildProfileDevice.udid == Device.udid)
        .label("included"),
        exists().where(BuildProfileDevice.build_id == Build.id).label("stored"),
    )
    .select_from(Build)
    .join(Device, true())
    .where(
        Build.id.in_(bindparam("build_ids", expanding=True)),
        Device.user_id == bindparam("user_id"),
        Device.platform != DevicePlatform.MACOS,
    )
    .order_by(Build.id, Device.id)
)


async def missed_on_page(
    reads: Reads, user_id: str, build_ids: list[str], opened_on: str | None
) -> dict[str, list[DeviceRecord]]:
    """Of `build_ids` (ad-hoc or development .ipa builds), those whose profile was made for none
    of the person's devices (of the kind that opens the page, when they have any), with the
    devices it misses: what a list of builds says beside each. One statement."""
    if not build_ids:
        return {}
    rows = await reads.all(_BUILDS_AGAINST_DEVICES, {"build_ids": build_ids, "user_id": user_id})
    seen: dict[str, tuple[list[DeviceRecord], list[DeviceRecord]]] = {}
    for row in rows:
        if not row["stored"]:
            continue
        included, missing = seen.setdefault(row["build_id"], ([], []))
        (included if row["included"] else missing).append(DEVICE.of(row))
    missed = {}
    for build_id, (included, missing) in seen.items():
        shown = ViewerDevices(*(_of_kind(d, opened_on) for d in (included, missing)))
        if shown.missing and not shown.included:
            missed[build_id] = shown.missing
    return missed


def _of_kind(devices: list[DeviceRecord], opened_on: str | None) -> list[DeviceRecord]:
    """The devices of the kind the page is opened on (an iPhone's User-Agent says iPhone), or
    all of them when it says none."""
    if opened_on is None:
        return devices
    return [d for d in devices if d.model.startswith(opened_on)]

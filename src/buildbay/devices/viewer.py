"""What an .ipa's install page says of the devices of the person viewing it (signed in, or the
person of a personal install link): which of theirs the build was not made for, said before
the Install button, and whether to offer to register the device in hand."""

from __future__ import annotations

from dataclasses import dataclass

from buildbay.db.reads import Reads
from buildbay.devices.enums import DevicePlatform
from buildbay.devices.reach import person_reach
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
        found = [d for d in devices if d.platform is not DevicePlatform.MACOS]
        if opened_on is None:
            return found
        return [d for d in found if d.model.startswith(opened_on)]

    return ViewerDevices(shown(included), shown(missing))

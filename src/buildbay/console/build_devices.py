"""The build page's devices (issue 37): for an ad-hoc or development .ipa, the enrolled devices of
the project's testers that its profile misses, by tester ("3 testers can't install this build");
for an enterprise or App Store profile, that any device can install it; for a build verified
before profiles' devices were kept, that they are not known."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from buildbay.builds.records import BuildRecord
from buildbay.db.reads import Reads
from buildbay.devices.enums import DevicePlatform
from buildbay.devices.profiles import known_scope
from buildbay.devices.reach import build_reach
from buildbay.devices.records import DeviceRecord, ProfileScope


@dataclass(frozen=True, slots=True)
class MissedDevice:
    tester: str  # their name, else their e-mail (the page is developers')
    device: DeviceRecord


@dataclass(frozen=True, slots=True)
class BuildDevices:
    scope: ProfileScope
    profile_kind: str | None  # ad-hoc, development, enterprise, app-store; None: no profile read
    missing: list[MissedDevice]  # by tester, then device name
    included: int  # enrolled iPhones and iPads its profile lists

    @property
    def testers_missed(self) -> int:
        return len({m.device.user_id for m in self.missing})


def _kind(metadata: dict[str, Any] | None) -> str | None:
    provisioning = (metadata or {}).get("provisioning")
    kind = provisioning.get("type") if isinstance(provisioning, dict) else None
    return kind if isinstance(kind, str) else None


async def build_devices(
    reads: Reads, build: BuildRecord, testers: dict[str, str]
) -> BuildDevices | None:
    """None for a build that is not an .ipa. `testers`: the members' names by user id."""
    scope = await known_scope(reads, build.id, build.file_name, build.metadata_)
    reach = await build_reach(reads, build.project_id, build.id, scope)
    if reach is None:
        return None
    # An .ipa goes over the air to iPhones and iPads: an enrolled Mac is not missed by it.
    missing = [
        MissedDevice(testers.get(d.user_id, "a former member"), d)
        for d in reach.missing
        if d.platform is not DevicePlatform.MACOS
    ]
    missing.sort(key=lambda m: (m.tester.casefold(), m.device.name.casefold(), m.device.id))
    included = sum(d.platform is not DevicePlatform.MACOS for d in reach.included)
    return BuildDevices(reach.scope, _kind(build.metadata_), missing, included)

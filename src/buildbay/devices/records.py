"""Devices as read (reads.py gives them): plain records, free of the database."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from buildbay.devices.enums import DevicePlatform


@dataclass(frozen=True, slots=True)
class DeviceRecord:
    id: str
    user_id: str
    udid: str
    name: str
    model: str
    os_version: str
    platform: DevicePlatform
    serial: str | None
    enrolled_at: datetime
    last_seen_at: datetime


class ProfileScope(StrEnum):
    """Which devices an .ipa installs on, by its provisioning profile (builds/ipa.py)."""

    LISTED = "listed"  # ad-hoc or development: the devices its profile lists
    ANY = "any"  # enterprise, or App Store (TestFlight): any device
    UNKNOWN = "unknown"  # no profile read (verified before issue 37, or none in the file)


@dataclass(frozen=True, slots=True)
class DeviceTester:
    """The member a device belongs to (`DeviceRecord.user_id`)."""

    id: str
    email: str
    name: str


@dataclass(frozen=True, slots=True)
class Reach:
    """The enrolled devices of a project's members that a build's profile includes and misses
    (both empty unless its scope is LISTED), and the members they belong to, by user id."""

    scope: ProfileScope
    included: list[DeviceRecord]
    missing: list[DeviceRecord]
    testers: Mapping[str, DeviceTester] = field(default_factory=dict)

    def testers_who_cannot_install(self) -> list[DeviceTester]:
        """The members with an enrolled device and none of theirs in the profile: "3 testers
        can't install this build"."""
        able = {device.user_id for device in self.included}
        unable = dict.fromkeys(d.user_id for d in self.missing if d.user_id not in able)
        return [self.testers[user_id] for user_id in unable if user_id in self.testers]


@dataclass(frozen=True, slots=True)
class ReachCounts:
    """How many of the project's members' enrolled devices a LISTED profile includes, of how
    many, and how many members have devices none of which it includes."""

    devices: int
    included: int
    testers: int  # members with an enrolled device
    testers_included: int  # members with a device the profile includes

    @property
    def missing(self) -> int:
        return self.devices - self.included

    @property
    def testers_unable(self) -> int:
        return self.testers - self.testers_included


@dataclass(frozen=True, slots=True)
class ReachedDevice:
    """A member's device on a page of a build's reach: whether the build's profile lists it."""

    device: DeviceRecord
    tester: DeviceTester
    included: bool

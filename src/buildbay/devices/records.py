"""Devices as read (reads.py gives them): plain records, free of the database."""

from __future__ import annotations

from dataclasses import dataclass
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
class Reach:
    """The enrolled devices of a project's members that a build's profile includes and misses
    (both empty unless its scope is LISTED)."""

    scope: ProfileScope
    included: list[DeviceRecord]
    missing: list[DeviceRecord]

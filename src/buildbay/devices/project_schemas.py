"""The project's devices as the API shows them to its developers (devices/project_routes.py)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from buildbay.devices.enums import DevicePlatform
from buildbay.devices.records import ProfileScope
from buildbay.schemas import ApiModel, Timestamp


class DeviceTester(ApiModel):
    """The member the device belongs to."""

    id: str
    email: str
    name: str


class TesterDevice(ApiModel):
    """An enrolled iPhone, iPad or Mac, as it described itself, and its tester."""

    id: str
    udid: str = Field(description="Upper case: 40 hex digits, or 8 and 16 with a dash, or a Mac's")
    name: str
    model: str = Field(description="The product, e.g. `iPhone14,2`")
    os_version: str = Field(description="The OS build, e.g. `21E236`")
    platform: DevicePlatform
    serial: str | None
    tester_id: str
    enrolled_at: Timestamp
    last_seen_at: Timestamp
    tester: DeviceTester


class ProfileInclusion(ApiModel):
    application_id: str
    build_id: str = Field(description="The application's newest ready ad-hoc or development .ipa")
    included: bool | None = Field(
        description="Whether its provisioning profile lists the device (can install it); "
        "null when its profile's devices are not known (verified before devices were)"
    )


class ProjectDevice(TesterDevice):
    in_profile_of_latest: dict[str, ProfileInclusion | None] = Field(
        description="By application id, for each iOS application of the project: whether its "
        "newest ready ad-hoc or development .ipa installs on the device; null for an "
        "application without such a build"
    )


class LatestProfile(ApiModel):
    """An iOS application of the project and the build `inProfileOfLatest` looks at."""

    application_id: str
    name: str
    build_id: str | None = Field(
        description="Its newest ready ad-hoc or development .ipa; null if it has none"
    )


class ProjectDeviceList(ApiModel):
    devices: list[ProjectDevice]
    applications: list[LatestProfile] = Field(
        description="The project's iOS applications, in the order they were created: the keys "
        "of each device's `inProfileOfLatest`"
    )
    next_cursor: str | None


class BuildDevices(ApiModel):
    """Which enrolled devices of the project's members a build installs on: counts over all of
    them, and a page of them."""

    build_id: str
    scope: ProfileScope | None = Field(
        description="`listed`: an ad-hoc or development profile, which installs only on the "
        "devices it lists; `any`: an enterprise or App Store profile, which installs on any "
        "device; `unknown`: an .ipa whose profile was not read (none in the file, or verified "
        "before devices were); null: not an .ipa"
    )
    profile_type: Literal["ad-hoc", "development", "enterprise", "app-store"] | None = Field(
        description="The provisioning profile's type, as the build's metadata says"
    )
    included_count: int | None = Field(
        description="`listed` only: the members' devices the profile lists (null otherwise)"
    )
    missing_count: int | None = Field(
        description="`listed` only: the members' enrolled devices it does not list"
    )
    testers_unable_count: int | None = Field(
        description="`listed` only: members with enrolled devices none of which it lists, who "
        "cannot install the build"
    )
    included: list[TesterDevice] = Field(
        description="This page's devices that the profile lists (`listed` only)"
    )
    missing: list[TesterDevice] = Field(
        description="This page's devices that it does not list (`listed` only)"
    )
    next_cursor: str | None

"""The devices' request and response bodies: a tester's own devices (`/api/account/devices`) and
a developer's wish for a mail per enrolled device."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from pydantic import Field

from buildbay.devices.enums import DevicePlatform
from buildbay.devices.records import DeviceRecord
from buildbay.schemas import ApiModel, RequestModel, Timestamp, Trimmed

# Apple's limit on a registered device's name (App Store Connect, "Register Multiple Devices").
DEVICE_NAME_MAX = 50

DeviceName = Annotated[
    str,
    Field(
        min_length=1,
        max_length=DEVICE_NAME_MAX,
        description=f"1..{DEVICE_NAME_MAX} characters (Apple's limit), trimmed; shown to people",
    ),
    Trimmed(shown=True),
]


class Device(ApiModel):
    """A tester's iPhone, iPad or Mac, as it described itself when it enrolled."""

    id: str
    udid: str = Field(description="Upper case: 40 hex digits, or 8-16 (since 2018), or a UUID")
    name: str = Field(description="What the device calls itself (DEVICE_NAME), or its new name")
    model: str = Field(description="The product: `iPhone14,2`, `iPad13,1`, `Mac14,2`")
    os_version: str = Field(description="The system's build, as the device says: `21E236`")
    platform: DevicePlatform
    serial: str | None
    tester_id: str = Field(description="The user who enrolled it (`usr_...`)")
    enrolled_at: Timestamp
    last_seen_at: Timestamp = Field(description="The last time it enrolled (again)")


def device_schema(device: DeviceRecord) -> Device:
    return Device(
        id=device.id,
        udid=device.udid,
        name=device.name,
        model=device.model,
        os_version=device.os_version,
        platform=device.platform,
        serial=device.serial,
        tester_id=device.user_id,
        enrolled_at=device.enrolled_at,
        last_seen_at=device.last_seen_at,
    )


class DeviceList(ApiModel):
    devices: list[Device]


class RenameDeviceRequest(RequestModel):
    EXAMPLE: ClassVar[dict[str, Any] | None] = {"name": "Ada's test iPhone"}

    name: DeviceName


class DeviceMail(ApiModel):
    device_mail: bool = Field(
        description="Whether you get a mail for each device one of the project's members enrolls"
    )


class DeviceMailRequest(RequestModel):
    EXAMPLE: ClassVar[dict[str, Any] | None] = {"deviceMail": True}

    device_mail: bool = Field(strict=True)

"""Devices in the words the pages and mails use: "your iPhone", "your iPad"."""

from __future__ import annotations

from buildbay.devices.enums import DevicePlatform
from buildbay.devices.records import DeviceRecord

# What the page calls a device, by the start of its product name (PRODUCT: iPhone14,2).
_NOUNS = (("iPhone", "iPhone"), ("iPad", "iPad"), ("iPod", "iPod touch"))


def noun(device: DeviceRecord) -> str:
    """iPhone, iPad, iPod touch or Mac."""
    for prefix, word in _NOUNS:
        if device.model.startswith(prefix):
            return word
    return {DevicePlatform.IPADOS: "iPad", DevicePlatform.MACOS: "Mac"}.get(
        device.platform, "iPhone"
    )


def nouns(devices: list[DeviceRecord]) -> str:
    """The devices' common noun, in the plural when they are several ("iPhones"), or "devices"
    when they are of several kinds."""
    kinds = {noun(d) for d in devices}
    if len(kinds) != 1:
        return "devices"
    [kind] = kinds
    return kind if len(devices) == 1 else kind + "s"

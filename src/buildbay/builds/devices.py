"""Which device a page is opened on, from its User-Agent, and which builds install there.

A tester taps the one button that works on their phone: "Install" (itms-services) for an .ipa
on an iPhone or iPad, "Download" for an .apk on Android, and a plain sentence when the build is
for the other platform. iPadOS Safari asks for desktop pages and says "Macintosh": that is
`Device.OTHER`, which is offered every button with a hint, never refused.
"""

from __future__ import annotations

import re
from enum import StrEnum

from buildbay.builds.metadata import platform_of_name


class Device(StrEnum):
    IOS = "ios"
    ANDROID = "android"
    OTHER = "other"


_IOS = re.compile(r"\b(iPhone|iPad|iPod)\b")
_ANDROID = re.compile(r"\bAndroid\b")


def device_of(user_agent: str | None) -> Device:
    agent = user_agent or ""
    if _IOS.search(agent):
        return Device.IOS
    if _ANDROID.search(agent):
        return Device.ANDROID
    return Device.OTHER


def apple_model_of(user_agent: str | None) -> str | None:
    """ "iPhone", "iPad" or "iPod" as the User-Agent names it; None for anything else (an iPad
    that asks for desktop pages says "Macintosh": None)."""
    found = _IOS.search(user_agent or "")
    return found.group(1) if found else None


def is_ios_build(file_name: str) -> bool:
    return platform_of_name(file_name) == "ios"


def is_android_build(file_name: str) -> bool:
    return platform_of_name(file_name) == "android"

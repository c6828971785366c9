"""Device platforms, and reading one from what a device says about itself.

Free of SQLAlchemy: the models store them, the schemas name them (tests/test_layers.py).
"""

from __future__ import annotations

import re
from enum import StrEnum


class DevicePlatform(StrEnum):
    IOS = "ios"
    IPADOS = "ipados"
    MACOS = "macos"

    @property
    def apple_name(self) -> str:
        """The platform as Apple's device registration names it (`IOS` covers iPadOS too)."""
        return "MAC_OS" if self is DevicePlatform.MACOS else "IOS"


def platform_of_product(product: str) -> DevicePlatform:
    """The platform of a device by its product name, as its profile service answer gives it
    (`iPhone14,2`, `iPad13,1`, `iPod9,1`, `MacBookPro18,1`, `Mac14,2`)."""
    if product.startswith("iPad"):
        return DevicePlatform.IPADOS
    if product.startswith(("Mac", "iMac")):
        return DevicePlatform.MACOS
    return DevicePlatform.IOS


# A UDID is 40 hex digits (devices before 2018) or 8 hex digits, a dash and 16 (since the
# iPhone XS); Mac UDIDs are 36-character UUIDs, 8-4-4-4-12. Compared in upper case.
_UDID = re.compile(
    r"[0-9A-F]{40}|[0-9A-F]{8}-[0-9A-F]{16}|[0-9A-F]{8}(?:-[0-9A-F]{4}){3}-[0-9A-F]{12}"
)


def normalise_udid(value: str) -> str | None:
    """The UDID in the one form stored and compared (upper case), or None if it is not one."""
    udid = value.strip().upper()
    return udid if _UDID.fullmatch(udid) else None

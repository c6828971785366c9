"""Plain values of the Apple registrations, for the service and the schemas alike."""

from __future__ import annotations

from enum import StrEnum


class Outcome(StrEnum):
    """What registering a device with Apple came to."""

    CREATED = "created"  # Apple registered the device now
    EXISTING = "existing"  # Apple had it already (registered some other way): recorded now
    UNCHANGED = "unchanged"  # registered through this project before: Apple was not asked

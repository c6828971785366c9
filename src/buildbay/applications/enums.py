"""The platforms an application is for.

Free of SQLAlchemy: the models store them, the schemas name them (tests/test_layers.py).
"""

from __future__ import annotations

from enum import StrEnum


class Platform(StrEnum):
    ANDROID = "android"
    IOS = "ios"
    MACOS = "macos"
    WINDOWS = "windows"
    LINUX = "linux"
    OTHER = "other"


class VersionPolicy(StrEnum):
    """What verify does with a build whose version code a ready build of other bytes of the
    same application already has: say so in a warning (`warn`, the default), or refuse it with
    409 `version_exists` (`unique`)."""

    WARN = "warn"
    UNIQUE = "unique"

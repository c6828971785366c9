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


# The files a build of each platform comes as: what the console's file picker offers (its
# `accept`), and what an application of the platform takes (builds/metadata.py: a file of
# another kind is refused, `wrong_platform`). `other` takes every file.
FILE_TYPES = {
    Platform.ANDROID: (".apk", ".aab"),
    Platform.IOS: (".ipa",),
    Platform.MACOS: (".dmg", ".pkg", ".zip"),
    Platform.WINDOWS: (".msix", ".msi", ".exe", ".appx", ".msixbundle", ".appxbundle", ".zip"),
    Platform.LINUX: (".appimage", ".deb", ".rpm", ".snap", ".flatpak", ".gz", ".xz", ".zip"),
    Platform.OTHER: (),
}


class VersionPolicy(StrEnum):
    """What verify does with a build whose version code a ready build of other bytes of the
    same application already has: say so in a warning (`warn`, the default), or refuse it with
    409 `version_exists` (`unique`)."""

    WARN = "warn"
    UNIQUE = "unique"

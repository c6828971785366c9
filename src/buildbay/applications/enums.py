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

"""What the client checks of a build file before it sends a byte: that the application's
platform takes it (the server checks again, by name at step 1 and by content at verify)."""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

# As the server's builds/metadata.py: an application of another platform takes any file.
PLATFORM_FILES: dict[str, tuple[str, ...]] = {"android": (".apk", ".aab"), "ios": (".ipa",)}
_NAMES = {"android": "Android", "ios": "iOS"}


_ANDROID_MANIFESTS = {"AndroidManifest.xml", "base/manifest/AndroidManifest.xml"}  # .apk, .aab
_IOS_INFO = re.compile(r"Payload/[^/]+\.app/Info\.plist")


def platform_of(path: Path) -> str | None:
    """The mobile platform a zip archive's directory says it is built for, or None."""
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
    except (zipfile.BadZipFile, OSError, ValueError, EOFError):
        return None
    for name in names:
        if name in _ANDROID_MANIFESTS:
            return "android"
        if _IOS_INFO.fullmatch(name):
            return "ios"
    return None


def platform_problem(path: Path, platform: str) -> str | None:
    """Why an application of `platform` will refuse this file (a sentence), or None."""
    takes = PLATFORM_FILES.get(platform)
    if takes is None:
        return None
    name = _NAMES[platform]
    if path.suffix.lower() not in takes:
        kinds = " or ".join(takes)
        return f"{path.name} is not an {name} build: this {name} application takes {kinds} files"
    content = platform_of(path)
    if content is not None and content != platform:
        return f"{path.name} is an {_NAMES[content]} app, and this is an {name} application"
    return None

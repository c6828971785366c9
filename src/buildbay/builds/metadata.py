"""What a build file says about itself: the parser for its format, within fixed bounds.

`.ipa` (builds/ipa.py), `.apk` and `.aab` (builds/android.py). Other files have no metadata.
An application of a mobile platform takes only its platform's files (`PLATFORM_FILES`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any

from buildbay.builds.android import parse_aab, parse_apk
from buildbay.builds.archive import MetadataError, Parsed, open_archive
from buildbay.builds.ipa import parse_ipa
from buildbay.text import (
    NAME_MAX,
    VERSION_MAX,
    bundle_id_problem,
    shown_text_problem,
    version_code_problem,
)

_PARSERS: dict[str, Callable[[IO[bytes]], Parsed]] = {
    "aab": parse_aab,
    "apk": parse_apk,
    "ipa": parse_ipa,
}


# The files an application of a mobile platform takes, by name and then by content; an
# application of any other platform (desktop installers, `other`) takes any file.
PLATFORM_FILES: dict[str, tuple[str, ...]] = {"android": ("apk", "aab"), "ios": ("ipa",)}
_PLATFORM_NAMES = {"android": "Android", "ios": "iOS"}


def suffix_of(file_name: str) -> str:
    """The file name's extension, lower case, without the dot ("" if it has none)."""
    return file_name.rsplit(".", 1)[-1].lower() if "." in file_name else ""


def platform_of_name(file_name: str) -> str | None:
    """The mobile platform a file is built for by its name ("android", "ios"), or None."""
    suffix = suffix_of(file_name)
    return next((p for p, takes in PLATFORM_FILES.items() if suffix in takes), None)


def wrong_platform_problem(platform: str, file_name: str) -> str | None:
    """Why an application of `platform` does not take a file of this name (a sentence), or
    None if it does."""
    takes = PLATFORM_FILES.get(platform)
    if takes is None or suffix_of(file_name) in takes:
        return None
    kinds = " or ".join(f".{suffix}" for suffix in takes)
    return (
        f"This is an {_PLATFORM_NAMES[platform]} application: it takes {kinds} files, and "
        f'"{file_name}" is not one'
    )


_ANDROID_MANIFESTS = {"AndroidManifest.xml", "base/manifest/AndroidManifest.xml"}  # .apk, .aab
_IOS_INFO = re.compile(r"Payload/[^/]+\.app/Info\.plist")


def platform_of_content(open_file: Callable[[], IO[bytes]]) -> str | None:
    """The mobile platform an archive's entries say it is built for ("android" or "ios"), from
    its directory alone; None for anything else."""
    try:
        with open_file() as file:
            archive, entries = open_archive(file)
            archive.close()
    except MemoryError:
        raise
    except Exception:  # any way the archive breaks zipfile (MetadataError, OSError, ...)
        return None
    for name in entries:
        if name in _ANDROID_MANIFESTS:
            return "android"
        if _IOS_INFO.fullmatch(name):
            return "ios"
    return None


def platform_name(platform: str) -> str:
    return _PLATFORM_NAMES.get(platform, platform)


def _version(value: str) -> str | None:
    return shown_text_problem(value, VERSION_MAX)


def _name(value: str) -> str | None:
    return shown_text_problem(value, NAME_MAX)


# Every field a parser reads from a file, with its name for people and the rule of the API's own
# field it stands beside (buildbay.text): what a file says is trusted no more than what a client
# sends. A file's bundle id becomes its application's `bundleId`; names and versions are shown on
# pages and in a tester's install prompt.
_TEXT_FIELDS: dict[str, tuple[str, Callable[[str], str | None]]] = {
    "bundleId": ("bundle id (CFBundleIdentifier)", bundle_id_problem),
    "packageName": ("package name", bundle_id_problem),
    "shortVersion": ("version (CFBundleShortVersionString)", _version),
    "buildNumber": ("build number (CFBundleVersion)", _version),
    "minOs": ("minimum OS version (MinimumOSVersion)", _version),
    "versionName": ("versionName", _version),
    "appName": ("app name", _name),
}
_NUMBER_FIELDS = {
    "versionCode": "versionCode",
    "minSdk": "minSdkVersion",
    "targetSdk": "targetSdkVersion",
}


def metadata_problem(metadata: dict[str, Any]) -> str | None:
    """Why what a file says about itself cannot be taken (a sentence's end), or None."""
    for key, (label, problem_of) in _TEXT_FIELDS.items():
        value = metadata.get(key)
        if value is None:
            continue
        if not isinstance(value, str):
            return f"its {label} is not text"
        if problem := problem_of(value):
            return f"its {label} {problem}"
    for key, label in _NUMBER_FIELDS.items():
        value = metadata.get(key)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool):
            return f"its {label} is not a whole number"
        if problem := version_code_problem(value):
            return f"its {label} {problem}"
    return None


@dataclass(frozen=True)
class Reading:
    metadata: dict[str, Any] | None = None
    icon_png: bytes | None = None
    error: str | None = None  # why a file in a known format has no metadata
    # Why the file parses but what it says breaks the API's rules (a sentence): verify refuses it.
    refused: str | None = None
    # For a file whose metadata cannot be read: the mobile platform its entries say it is for.
    platform: str | None = None
    profile_udids: tuple[str, ...] = ()  # archive.Parsed's


def has_parser(file_name: str) -> bool:
    """Whether a file of this name has metadata to read (.ipa, .apk, .aab)."""
    return suffix_of(file_name) in _PARSERS


def read_metadata(open_file: Callable[[], IO[bytes]], file_name: str) -> Reading:
    """What the file says, for a file in a known format; why not (and which platform its
    entries say it is for), if it does not parse as the format its name claims; nothing for
    other files. Blocking, and bounded only by the parsers' own limits: the server runs it in a
    reading process with limits of time and memory (builds/readers.py); MemoryError is left to
    that process to report."""
    suffix = suffix_of(file_name)
    parser = _PARSERS.get(suffix)
    if parser is None:
        return Reading()
    try:
        with open_file() as file:
            parsed = parser(file)
    except MetadataError as exc:
        error = f"Not a readable .{suffix}: {exc}"
        return Reading(error=error, platform=platform_of_content(open_file))
    except MemoryError:
        raise
    except Exception as exc:  # a parser bug must not cost the build
        error = f"Not a readable .{suffix}: {type(exc).__name__}"
        return Reading(error=error, platform=platform_of_content(open_file))
    if problem := metadata_problem(parsed.metadata):
        return Reading(refused=f"This .{suffix} cannot be taken: {problem}")
    return Reading(parsed.metadata, parsed.icon_png, profile_udids=parsed.profile_udids)

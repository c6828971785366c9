"""What a build file says about itself: the parser for its format, within fixed bounds.

`.ipa` (builds/ipa.py), `.apk` and `.aab` (builds/android.py). Other files have no metadata.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any

from buildbay.builds.android import parse_aab, parse_apk
from buildbay.builds.archive import MetadataError, Parsed
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


# Each parse is bounded (the entries it reads, and what it keeps of them); this bounds how many
# run at once in a process, so the memory bound holds for the process, not per verify.
PARALLEL_PARSES = 2
_slots = threading.BoundedSemaphore(PARALLEL_PARSES)


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


def read_metadata(open_file: Callable[[], IO[bytes]], file_name: str) -> Reading:
    """What the file says, for a file in a known format; why not, if it does not parse as the
    format its name claims; nothing for other files. Blocking: run it in a worker thread."""
    suffix = file_name.rsplit(".", 1)[-1].lower() if "." in file_name else ""
    parser = _PARSERS.get(suffix)
    if parser is None:
        return Reading()
    try:
        with _slots, open_file() as file:
            parsed = parser(file)
    except MetadataError as exc:
        return Reading(error=f"Not a readable .{suffix}: {exc}")
    except Exception as exc:  # a parser bug must not cost the build
        return Reading(error=f"Not a readable .{suffix}: {type(exc).__name__}")
    if problem := metadata_problem(parsed.metadata):
        return Reading(refused=f"This .{suffix} cannot be taken: {problem}")
    return Reading(parsed.metadata, parsed.icon_png)

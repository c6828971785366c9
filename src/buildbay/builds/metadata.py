"""What a build file says about itself: the parser for its format, within fixed bounds.

Mobile: `.ipa` (builds/ipa.py), `.apk` and `.aab` (builds/android.py). Desktop (builds/macos.py,
windows.py, linux.py): a `.zip` of a macOS `.app`, `.pkg`, `.msix`/`.appx` and their bundles,
`.exe`, `.deb`, `.rpm`, whose metadata is read; `.dmg`, `.msi`, `.AppImage`, `.snap`, `.gz`, `.xz`,
which are only recognised (their versions come from verify's fields). Other files have no
metadata.

An application of a mobile or desktop platform takes only its platform's files (`PLATFORM_FILES`,
`DESKTOP_FILES`): by name at upload-link and verify, then by content at verify.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any

from buildbay.applications.enums import FILE_TYPES, Platform
from buildbay.builds.android import parse_aab, parse_apk
from buildbay.builds.archive import MetadataError, Parsed, open_archive, platform_of_entries
from buildbay.builds.ipa import parse_ipa
from buildbay.builds.linux import (
    DESCRIPTION_MAX,
    check_appimage,
    check_gzip,
    check_snap,
    check_xz,
    parse_deb,
    parse_rpm,
)
from buildbay.builds.macos import check_dmg, parse_app_zip, parse_pkg
from buildbay.builds.windows import check_msi, parse_exe, parse_msix, parse_msix_bundle
from buildbay.text import (
    BUNDLE_ID_MAX,
    NAME_MAX,
    VERSION_MAX,
    bundle_id_problem,
    shown_text_problem,
    version_code_problem,
)
from buildbay.words import platform_word

_PARSERS: dict[str, Callable[[IO[bytes]], Parsed]] = {
    "aab": parse_aab,
    "apk": parse_apk,
    "ipa": parse_ipa,
    # macOS; a .zip is read for an .app at its top, and is otherwise just a zip
    "zip": parse_app_zip,
    "pkg": parse_pkg,
    "dmg": check_dmg,
    # Windows
    "msix": parse_msix,
    "appx": parse_msix,
    "msixbundle": parse_msix_bundle,
    "appxbundle": parse_msix_bundle,
    "exe": parse_exe,
    "msi": check_msi,
    # Linux
    "deb": parse_deb,
    "rpm": parse_rpm,
    "appimage": check_appimage,
    "snap": check_snap,
    "gz": check_gzip,
    "xz": check_xz,
}


# The files an application of a mobile platform takes, by name and then by content.
PLATFORM_FILES: dict[str, tuple[str, ...]] = {"android": ("apk", "aab"), "ios": ("ipa",)}
# ... and of a desktop platform: the console's file picker offers the same (FILE_TYPES). An
# application of platform `other` takes any file.
DESKTOP_FILES: dict[str, tuple[str, ...]] = {
    platform.value: tuple(kind.lstrip(".") for kind in FILE_TYPES[platform])
    for platform in (Platform.MACOS, Platform.WINDOWS, Platform.LINUX)
}
_TAKES = {**PLATFORM_FILES, **DESKTOP_FILES}


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
    takes = _TAKES.get(platform)
    if takes is None or suffix_of(file_name) in takes:
        return None
    kinds = ", ".join(f".{suffix}" for suffix in takes[:-1])
    kinds = f"{kinds} or .{takes[-1]}" if kinds else f".{takes[-1]}"
    return (
        f"This is {a_platform(platform)} application: it takes {kinds} files, and "
        f'"{file_name}" is not one'
    )


def platform_of_content(open_file: Callable[[], IO[bytes]]) -> str | None:
    """The platform an archive's entries say it is built for (archive.platform_of_entries),
    from its directory alone; None for anything else."""
    try:
        with open_file() as file:
            archive, entries = open_archive(file)
            archive.close()
    except MemoryError:
        raise
    except Exception:  # any way the archive breaks zipfile (MetadataError, OSError, ...)
        return None
    return platform_of_entries(entries)


def unreadable_problem(platform: str, file_name: str, reading: Reading) -> str | None:
    """Why an application of `platform` refuses a file whose metadata was not read (a
    sentence), or None: a phone's application takes only builds whose metadata it reads (its
    testers' devices install only those); a desktop one, only files that are what their names
    say, and for a macOS application a .zip must be one of its .app."""
    if reading.metadata is not None:
        return None
    if platform in PLATFORM_FILES:
        return (
            f"{reading.error}; {a_platform(platform)} application takes only builds whose "
            "metadata can be read"
        )
    if platform not in DESKTOP_FILES:
        return None
    if reading.error is not None:
        return (
            f"{reading.error}; {a_platform(platform)} application takes only files that are "
            "what their names say"
        )
    if platform == Platform.MACOS and suffix_of(file_name) == "zip":
        return (
            "Not a readable .zip: no <name>.app at the top of the archive; a macOS "
            "application takes a .zip of its .app"
        )
    return None


def platform_name(platform: str) -> str:
    return platform_word(platform)


def a_platform(platform: str) -> str:
    """The platform's name with its article: "an iOS", "a macOS"."""
    name = platform_name(platform)
    return f"{'an' if name[:1] in 'AEIOUaeiou' else 'a'} {name}"


ARCH_MAX = 40
PUBLISHER_MAX = BUNDLE_ID_MAX * 4  # an MSIX publisher is a distinguished name: CN=..., O=..., C=..


def _version(value: str) -> str | None:
    return shown_text_problem(value, VERSION_MAX)


def _name(value: str) -> str | None:
    return shown_text_problem(value, NAME_MAX)


def _word(value: str) -> str | None:
    return shown_text_problem(value, ARCH_MAX)


def _description(value: str) -> str | None:
    return shown_text_problem(value, DESCRIPTION_MAX)


def _publisher(value: str) -> str | None:
    return shown_text_problem(value, PUBLISHER_MAX)


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
    # desktop files'
    "packageId": ("package identifier", bundle_id_problem),
    "identityName": ("identity name", bundle_id_problem),
    "publisher": ("publisher", _publisher),
    "package": ("package name", _name),
    "arch": ("architecture", _word),
    "description": ("description", _description),
    "productVersion": ("product version", _version),
    "fileVersion": ("file version", _version),
    "companyName": ("company name", _name),
}
# Where a format calls a field otherwise, its own name says which one is wrong.
_FORMAT_LABELS: dict[str, dict[str, str]] = {
    "zip": {"minOs": "minimum macOS version (LSMinimumSystemVersion)"},
    "pkg": {"shortVersion": "product version", "minOs": "minimum macOS version"},
    "msix": {"shortVersion": "Identity Version", "minOs": "minimum Windows version (MinVersion)"},
    "exe": {"shortVersion": "product version"},
    "deb": {"shortVersion": "Version", "package": "Package", "arch": "Architecture"},
    "rpm": {"shortVersion": "version", "buildNumber": "release", "package": "name"},
}
_FORMAT_LABELS["appx"] = _FORMAT_LABELS["msixbundle"] = _FORMAT_LABELS["appxbundle"] = (
    _FORMAT_LABELS["msix"]
)
_NUMBER_FIELDS = {
    "versionCode": "versionCode",
    "minSdk": "minSdkVersion",
    "targetSdk": "targetSdkVersion",
}


def metadata_problem(metadata: dict[str, Any], suffix: str = "ipa") -> str | None:
    """Why what a file (of this suffix) says about itself cannot be taken (a sentence's end), or
    None."""
    labels = _FORMAT_LABELS.get(suffix, {})
    for key, (label, problem_of) in _TEXT_FIELDS.items():
        value = metadata.get(key)
        if value is None:
            continue
        label = labels.get(key, label)
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
    # The platform the file is built for as its contents say: read, or for a file whose
    # metadata cannot be read, its archive's entries (None: they do not say).
    platform: str | None = None
    profile_udids: tuple[str, ...] = ()  # archive.Parsed's


def has_parser(file_name: str) -> bool:
    """Whether a file of this name has metadata to read, or a format to recognise."""
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
    if problem := metadata_problem(parsed.metadata, suffix):
        return Reading(refused=f"This .{suffix} cannot be taken: {problem}")
    return Reading(
        parsed.metadata or None,  # a format recognised, nothing read: no metadata
        parsed.icon_png,
        platform=parsed.platform,
        profile_udids=parsed.profile_udids,
    )

"""Reading parts of a build archive (a zip: .ipa, .apk, .aab) within fixed bounds.

Only the entries that name the app are read, each at most a bounded number of bytes whatever the
archive's directory claims: a zip bomb, a huge manifest or a corrupt archive ends in
MetadataError, never in unbounded memory or time. The directory itself is measured from its
end record before `zipfile` reads it (`zipfile` reads and indexes all of it at once).
"""

from __future__ import annotations

import re
import struct
import zipfile
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import IO, Any

ENTRIES_LIMIT = 100_000  # entries in the archive's directory
# The directory's bytes: 100,000 entries with names of ~200 bytes (an Xcode app's deepest paths)
# fit; zipfile holds them all, and makes an object per entry, before anything is read.
DIRECTORY_LIMIT = 32 * 1024 * 1024

_END = struct.Struct("<4sHHHHIIH")  # end of central directory record
_END_SIGNATURE = b"PK\x05\x06"
_ZIP64_LOCATOR = struct.Struct("<4sIQI")
_ZIP64_LOCATOR_SIGNATURE = b"PK\x06\x07"
_ZIP64_END = struct.Struct("<4sQHHIIQQQQ")
_ZIP64_END_SIGNATURE = b"PK\x06\x06"
_COMMENT_MAX = 0xFFFF


class MetadataError(Exception):
    """The file does not parse as what it claims to be; the message says why, for a person."""


@dataclass(frozen=True)
class Parsed:
    metadata: dict[str, Any]
    icon_png: bytes | None = None  # a PNG any browser shows, when the build has one
    # An ad-hoc or development .ipa's provisioning profile's UDIDs (`ProvisionedDevices`), upper
    # case: stored beside the build (devices.models.BuildProfileDevice), not in its metadata,
    # which every list reads.
    profile_udids: tuple[str, ...] = ()
    # The platform the file is built for, as its contents say (None: they do not say).
    platform: str | None = None


_ANDROID_MANIFESTS = {"AndroidManifest.xml", "base/manifest/AndroidManifest.xml"}  # .apk, .aab
_IOS_INFO = re.compile(r"Payload/[^/]+\.app/Info\.plist")
_MACOS_INFO = re.compile(r"[^/]+\.app/Contents/Info\.plist")
_WINDOWS_MANIFESTS = {"AppxManifest.xml", "AppxMetadata/AppxBundleManifest.xml"}


def platform_of_entries(names: Iterable[str]) -> str | None:
    """The platform an archive's entry names say it is built for ("android", "ios", "macos" or
    "windows"), or None."""
    for name in names:
        if name in _ANDROID_MANIFESTS:
            return "android"
        if _IOS_INFO.fullmatch(name):
            return "ios"
        if _MACOS_INFO.fullmatch(name):
            return "macos"
        if name in _WINDOWS_MANIFESTS:
            return "windows"
    return None


def open_archive(file: IO[bytes]) -> tuple[zipfile.ZipFile, dict[str, zipfile.ZipInfo]]:
    """The zip archive in `file`, and its entries by name: indexed once, for every lookup."""
    try:
        _check_directory(file)
        archive = zipfile.ZipFile(file)
    except (
        zipfile.BadZipFile,
        OSError,
        ValueError,
        EOFError,
        struct.error,
        NotImplementedError,  # a version or compression zipfile does not read
    ) as exc:
        raise MetadataError(f"not a zip archive: {exc}") from None
    entries = archive.infolist()
    if len(entries) > ENTRIES_LIMIT:
        archive.close()
        raise MetadataError(f"more than {ENTRIES_LIMIT} entries in the archive")
    return archive, {entry.filename: entry for entry in entries}


def _check_directory(file: IO[bytes]) -> None:
    """Refuse an archive whose end record declares more entries or directory bytes than the
    limits, before zipfile reads the directory. The end record is found as zipfile finds it
    (the file's last 22 bytes, else the last signature within a comment's reach); a file
    without one is left to zipfile to refuse."""
    size = file.seek(0, 2)
    tail_size = min(size, _END.size + _COMMENT_MAX)
    file.seek(size - tail_size)
    tail = file.read(tail_size)
    if tail[-_END.size : -_END.size + 4] == _END_SIGNATURE and tail[-2:] == b"\0\0":
        at = len(tail) - _END.size
    else:
        at = tail.rfind(_END_SIGNATURE)
    if at < 0 or at + _END.size > len(tail):
        return
    _, _, _, _, entries, directory, _, _ = _END.unpack_from(tail, at)
    locator_at = size - tail_size + at - _ZIP64_LOCATOR.size
    if locator_at >= 0:
        file.seek(locator_at)
        locator = file.read(_ZIP64_LOCATOR.size)
        if len(locator) == _ZIP64_LOCATOR.size and locator[:4] == _ZIP64_LOCATOR_SIGNATURE:
            # zipfile finds the zip64 end record just before the locator.
            file.seek(locator_at - _ZIP64_END.size)
            end64 = file.read(_ZIP64_END.size)
            if len(end64) == _ZIP64_END.size and end64[:4] == _ZIP64_END_SIGNATURE:
                entries, directory = _ZIP64_END.unpack(end64)[7:9]
    if entries > ENTRIES_LIMIT:
        raise MetadataError(f"more than {ENTRIES_LIMIT} entries in the archive")
    if directory > DIRECTORY_LIMIT:
        raise MetadataError(f"the archive's directory is larger than {DIRECTORY_LIMIT} bytes")


def read_entry(archive: zipfile.ZipFile, entry: zipfile.ZipInfo, limit: int) -> bytes:
    """An entry's bytes, refusing to inflate past `limit` whatever its header declares."""
    if entry.file_size > limit:
        raise MetadataError(f"{entry.filename} is larger than {limit} bytes")
    try:
        with archive.open(entry) as stream:
            data = stream.read(limit + 1)
    except (zipfile.BadZipFile, zlib.error, OSError, EOFError, NotImplementedError) as exc:
        raise MetadataError(f"{entry.filename} cannot be read: {exc}") from None
    if len(data) > limit:
        raise MetadataError(f"{entry.filename} is larger than {limit} bytes")
    return data


def read_head(archive: zipfile.ZipFile, entry: zipfile.ZipInfo, length: int) -> bytes:
    """The first `length` bytes of an entry (fewer if it is shorter), inflating no more than
    they need: a large entry (an app's executable) is never read whole."""
    try:
        with archive.open(entry) as stream:
            return stream.read(length)
    except (zipfile.BadZipFile, zlib.error, OSError, EOFError, NotImplementedError) as exc:
        raise MetadataError(f"{entry.filename} cannot be read: {exc}") from None

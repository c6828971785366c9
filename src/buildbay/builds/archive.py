"""Reading parts of a build archive (a zip: .ipa, .apk, .aab) within fixed bounds.

Only the entries that name the app are read, each at most a bounded number of bytes whatever the
archive's directory claims: a zip bomb, a huge manifest or a corrupt archive ends in
MetadataError, never in unbounded memory or time.
"""

from __future__ import annotations

import zipfile
import zlib
from dataclasses import dataclass
from typing import IO, Any

ENTRIES_LIMIT = 100_000  # entries in the archive's directory


class MetadataError(Exception):
    """The file does not parse as what it claims to be; the message says why, for a person."""


@dataclass(frozen=True)
class Parsed:
    metadata: dict[str, Any]
    icon_png: bytes | None  # a PNG any browser shows, when the build has one


def open_archive(file: IO[bytes]) -> tuple[zipfile.ZipFile, dict[str, zipfile.ZipInfo]]:
    """The zip archive in `file`, and its entries by name."""
    try:
        archive = zipfile.ZipFile(file)
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
        raise MetadataError(f"not a zip archive: {exc}") from None
    entries = archive.infolist()
    if len(entries) > ENTRIES_LIMIT:
        archive.close()
        raise MetadataError(f"more than {ENTRIES_LIMIT} entries in the archive")
    return archive, {entry.filename: entry for entry in entries}


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

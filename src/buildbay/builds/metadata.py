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

_PARSERS: dict[str, Callable[[IO[bytes]], Parsed]] = {
    "aab": parse_aab,
    "apk": parse_apk,
    "ipa": parse_ipa,
}


# Each parse is bounded (the entries it reads, and what it keeps of them); this bounds how many
# run at once in a process, so the memory bound holds for the process, not per verify.
PARALLEL_PARSES = 2
_slots = threading.BoundedSemaphore(PARALLEL_PARSES)


@dataclass(frozen=True)
class Reading:
    metadata: dict[str, Any] | None = None
    icon_png: bytes | None = None
    error: str | None = None  # why a file in a known format has no metadata


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
    return Reading(parsed.metadata, parsed.icon_png)

"""What a download's `Range` header asks of a file of a known size (RFC 9110, 14.1-14.2), read
before the bytes are served (download_routes.py hands the ranges to Starlette's FileResponse,
which streams them: one range as a 206 with Content-Range, several as multipart/byteranges).

This module only decides, as the RFC says a server does:
- a header that is not a valid `bytes` range set (another unit, a syntax error, a range whose
  last byte is before its first) is ignored: the whole file, 200;
- a set of which no range is satisfiable (all start at or past the end, a suffix of 0 bytes) is
  a 416 with `Content-Range: bytes */<size>`;
- otherwise the satisfiable ranges are served, written back in one canonical form, absolute
  and clamped to the file (what Starlette then reads: it would answer a malformed header, or
  any unsatisfiable range among good ones, with a plain-text 400 or 416 of its own).

electron-updater's differential download asks for up to 1000 ranges in one request
(multipleRangeDownloader.ts), in increasing order and never adjacent; MAX_RANGES admits them.
More than that is served whole (the RFC allows ignoring a Range header).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from buildbay.errors import BuildbayError

MAX_RANGES = 1000
_SPEC = re.compile(r"(\d*)-(\d*)")
_MAX_DIGITS = 19  # a position beyond 2**63 is no file's


class RangeNotSatisfiable(BuildbayError):
    status, code = 416, "range_not_satisfiable"

    def __init__(self, size: int) -> None:
        super().__init__(
            f"No requested range starts within the file, which has {size} bytes",
            headers={"Content-Range": f"bytes */{size}"},
        )


@dataclass(frozen=True, slots=True)
class Ranges:
    """The satisfiable ranges asked for, each (first, last) inclusive; empty: the whole file."""

    spans: tuple[tuple[int, int], ...]

    @property
    def header(self) -> str | None:
        """The Range header that asks for exactly these (None: no header, the whole file)."""
        if not self.spans:
            return None
        return "bytes=" + ",".join(f"{first}-{last}" for first, last in self.spans)


WHOLE = Ranges(())


def requested_ranges(header: str | None, size: int) -> Ranges:
    """The ranges `header` asks of a `size`-byte file; RangeNotSatisfiable if it asks only for
    bytes the file does not have."""
    if header is None:
        return WHOLE
    unit, equals, range_set = header.partition("=")
    if not equals or unit.strip().lower() != "bytes":
        return WHOLE
    specs = [spec.strip() for spec in range_set.split(",")]
    specs = [spec for spec in specs if spec]  # a list's empty elements are allowed (RFC 9110 5.6.1)
    if not specs or len(specs) > MAX_RANGES:
        return WHOLE
    spans: list[tuple[int, int]] = []
    for spec in specs:
        match = _SPEC.fullmatch(spec)
        if match is None:
            return WHOLE
        first_text, last_text = match.groups()
        if len(first_text) > _MAX_DIGITS or len(last_text) > _MAX_DIGITS:
            return WHOLE
        if first_text:
            first = int(first_text)
            if last_text and int(last_text) < first:
                return WHOLE  # invalid: the whole header is ignored
            if first >= size:
                continue  # unsatisfiable
            last = min(int(last_text), size - 1) if last_text else size - 1
        elif last_text:
            suffix = int(last_text)
            if suffix == 0 or size == 0:
                continue  # unsatisfiable
            first, last = max(size - suffix, 0), size - 1
        else:
            return WHOLE  # "-": neither end
        spans.append((first, last))
    if not spans:
        raise RangeNotSatisfiable(size)
    return Ranges(tuple(spans))

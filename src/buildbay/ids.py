"""Opaque, time-ordered identifiers and the list cursors built on them.

An id is a type prefix and a ULID (48-bit millisecond time, 80 random bits, Crockford base32).
Within one process ids are strictly increasing, so ``ORDER BY id DESC`` is "newest first" and a
keyset cursor is simply the last id of a page.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import threading
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_lock = threading.Lock()
_last = 0
ID_PATTERN = re.compile(r"[a-z]{2,4}_[0-9A-HJKMNP-TV-Z]{26}")  # the whole string: fullmatch


def _next_value() -> int:
    global _last
    with _lock:
        value = (time.time_ns() // 1_000_000) << 80 | int.from_bytes(os.urandom(10), "big")
        if value <= _last:
            value = _last + 1
        _last = value
        return value


def new_id(prefix: str) -> str:
    value = _next_value()
    chars = []
    for _ in range(26):
        chars.append(_ALPHABET[value & 31])
        value >>= 5
    return f"{prefix}_{''.join(reversed(chars))}"


def split_page(
    rows: Sequence[T], limit: int, id_of: Callable[[T], str]
) -> tuple[list[T], str | None]:
    """A keyset page from `limit + 1` rows fetched newest first: the first `limit`, and the
    cursor of the next page if the extra row says there is one."""
    page = list(rows[:limit])
    return page, encode_cursor(id_of(page[-1])) if len(rows) > limit else None


class InvalidCursorError(ValueError):
    pass


def encode_cursor(last_id: str) -> str:
    return base64.urlsafe_b64encode(last_id.encode()).rstrip(b"=").decode()


def decode_cursor(cursor: str) -> str:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        value = raw.decode("ascii")
    except (binascii.Error, UnicodeDecodeError, ValueError) as exc:
        raise InvalidCursorError(cursor) from exc
    if not ID_PATTERN.fullmatch(value):
        raise InvalidCursorError(cursor)
    return value

"""Whole numbers as clients write them in headers, query strings and forms."""

from __future__ import annotations


def whole_number(text: str, *, max_digits: int = 18) -> int | None:
    """`text` as a number if it is ASCII digits only, at most `max_digits` of them; else None.

    ASCII, because "²".isdigit() is true and int("²") raises; bounded, because int() refuses
    more than 4,300 digits (and a longer number means nothing any of our fields accept).
    """
    if text.isascii() and text.isdigit() and len(text) <= max_digits:
        return int(text)
    return None

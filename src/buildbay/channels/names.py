"""What a release channel's name may be, free of SQLAlchemy: the reads check it, the schemas
describe it (tests/test_layers.py keeps it so)."""

from __future__ import annotations

import re

NAME_PATTERN = r"^[a-z0-9._-]{1,40}$"
NAME_MAX = 40


def is_channel_name(value: str) -> bool:
    """Whether `value` may be a channel's name: one that may not (a NUL, say, which PostgreSQL
    refuses in text) is no channel's, and never reaches a query."""
    return re.fullmatch(NAME_PATTERN, value) is not None

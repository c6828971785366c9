"""What a release channel's name may be, free of SQLAlchemy: the reads check it, the schemas
describe it (tests/test_layers.py keeps it so)."""

from __future__ import annotations

NAME_PATTERN = r"^[a-z0-9._-]{1,40}$"
NAME_MAX = 40

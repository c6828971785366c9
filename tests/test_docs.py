"""The operations guide documents every setting the server reads."""

from __future__ import annotations

from pathlib import Path

from buildbay.config import Settings

OPERATIONS = Path(__file__).resolve().parent.parent / "docs" / "operations.md"


def test_every_setting_is_in_the_operations_guide() -> None:
    guide = OPERATIONS.read_text()
    missing = [name.upper() for name in Settings.model_fields if f"`{name.upper()}`" not in guide]
    assert missing == []

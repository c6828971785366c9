"""The security tests: every response they get is checked by the leak guard (tests/leaks.py)."""

from __future__ import annotations

import pytest

from tests.leaks import LeakGuard


@pytest.fixture(autouse=True)
def _no_leaks(no_leaks: LeakGuard) -> None:
    """Every response of these tests is checked for hashes, secrets shown again and internals."""

"""Fixtures for these tests, beside the suite-wide ones of tests/conftest.py."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from buildbay.config import Settings
from tests.leaks import LeakGuard

StoredFiles = Callable[..., list[Path]]


@pytest.fixture(autouse=True)
def _no_leaks(no_leaks: LeakGuard) -> None:
    """Every response of these tests is checked for hashes, secrets shown again and internals."""


@pytest.fixture
def stored_files(settings: Settings) -> StoredFiles:
    """Files of the local build store whose path names every one of the given ids."""

    def find(*ids: str) -> list[Path]:
        root = settings.storage_dir
        return [p for p in root.rglob("*") if p.is_file() and all(i in p.parts for i in ids)]

    return find

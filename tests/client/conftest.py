"""The client's tests reach the service over HTTP only: it runs in a thread of the test
process (tests/conftest.py), but where a test kills and restarts it (a process of its own)."""

from __future__ import annotations

import pytest


@pytest.fixture
def server(threaded_server: str) -> str:
    return threaded_server

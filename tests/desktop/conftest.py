"""The desktop builds' tests use the builds tests' application and upload steps."""

from __future__ import annotations

from tests.builds.conftest import _no_leaks, builds

__all__ = ["_no_leaks", "builds"]

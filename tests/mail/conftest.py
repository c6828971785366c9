from __future__ import annotations

from tests.smtp import smtp

__all__ = ["smtp"]

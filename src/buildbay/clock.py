"""Time comes from a clock object so tests can move it instead of sleeping."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime: ...

    def monotonic(self) -> float:
        """Seconds from some fixed moment, never going back: for how long something lasts
        (the time of day may be set back or forward meanwhile)."""
        ...


class SystemClock:
    def now(self) -> datetime:
        # Whole seconds, the precision the API shows: what is stored is what clients see, and
        # a timestamp read back needs no rounding before it is written out.
        return datetime.now(UTC).replace(microsecond=0)

    def monotonic(self) -> float:
        return time.monotonic()


class FrozenClock:
    """A clock that stands still until told to move (for tests); `advance` moves its
    `monotonic` by as much."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = self._start = start or SystemClock().now()

    def now(self) -> datetime:
        return self._now

    def monotonic(self) -> float:
        return (self._now - self._start).total_seconds()

    def advance(self, **delta: float) -> None:
        self._now += timedelta(**delta)


def utc_whole_seconds(value: datetime) -> datetime:
    """`value` in UTC without its fraction of a second (a naive datetime is taken as UTC)."""
    if value.microsecond == 0 and value.tzinfo is UTC:
        return value
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    elif value.tzinfo is not UTC:
        value = value.astimezone(UTC)
    return value.replace(microsecond=0)

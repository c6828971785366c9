"""Properties of the rate-limit state and its headers (buildbay.ratelimit.limiter), over any
sequence of requests and pauses: RateLimit and RateLimit-Policy are well-formed structured
fields (IETF httpapi ratelimit-headers draft), `r` is never negative, `t` is within the window,
and a refused client that waits Retry-After seconds is served."""

from __future__ import annotations

import asyncio
import re
import time
from types import SimpleNamespace
from typing import Any
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.requests import Request

from buildbay.auth.dependencies import count_request
from buildbay.clock import SystemClock
from buildbay.config import Plan, Settings
from buildbay.errors import RateLimited
from buildbay.ratelimit.limiter import WINDOW_SECONDS, RateLimiter, RateLimitState

POLICY = re.compile(r'"(?P<policy>[a-z]+)";q=(?P<q>[0-9]+);w=(?P<w>[0-9]+)')
RATELIMIT = re.compile(r'"(?P<policy>[a-z]+)";r=(?P<r>[0-9]+);t=(?P<t>[0-9]+)')

# A request, or a pause of some seconds (whole ones too: a request exactly a window later).
steps = st.lists(
    st.just("request") | st.integers(0, 90) | st.floats(0, 90, allow_nan=False), max_size=60
)


class Clock:
    """time.time() for the limiter and its counters, moved by the test."""

    def __init__(self) -> None:
        self.now = 1_800_000_000.25

    def time(self) -> float:
        return self.now


def limiter(per_minute: int) -> RateLimiter:
    return RateLimiter(Settings(rate_limit_free_per_minute=per_minute), SystemClock())


async def counted(limiter: RateLimiter) -> tuple[RateLimitState, dict[str, str] | None]:
    """One request through `count_request`: its state, and the 429's headers if refused."""
    request = Request({"type": "http", "headers": [], "state": {}})
    try:
        await count_request(SimpleNamespace(limiter=limiter), request, "user:1", Plan.FREE)  # type: ignore[arg-type]
    except RateLimited as refused:
        return request.state.ratelimit, refused.headers
    return request.state.ratelimit, None


def check_headers(state: RateLimitState, per_minute: int) -> tuple[int, int]:
    headers = state.headers()
    policy = POLICY.fullmatch(headers["RateLimit-Policy"])
    current = RATELIMIT.fullmatch(headers["RateLimit"])
    assert policy, headers
    assert current, headers
    assert policy["policy"] == current["policy"] == "free"
    assert (int(policy["q"]), int(policy["w"])) == (per_minute, WINDOW_SECONDS)
    return int(current["r"]), int(current["t"])


# No deadline: what is checked is the headers' arithmetic, and on a busy CI machine one example
# may take longer than hypothesis's default 200 ms.
@settings(deadline=None)
@given(st.integers(1, 12), steps)
def test_rate_limit_headers_over_any_requests_and_pauses(per_minute: int, plan: list[Any]) -> None:
    clock = Clock()
    served: list[float] = []  # when each request that was served came

    async def run() -> None:
        counter = limiter(per_minute)
        for step in plan:
            if step != "request":
                clock.now += step
                continue
            in_window = [t for t in served if t >= clock.now - WINDOW_SECONDS]
            state, refusal = await counted(counter)
            remaining, reset = check_headers(state, per_minute)

            # The moving window: a request more than 60 s old no longer counts.
            assert state.allowed == (len(in_window) < per_minute)
            assert 0 <= remaining < per_minute
            if state.allowed:
                served.append(clock.now)
                assert refusal is None
                assert 0 <= reset <= WINDOW_SECONDS
                continue
            assert remaining == 0
            assert refusal is not None
            assert refusal["Retry-After"] == str(reset)
            # A request counts until it is more than a window old: at most a second more.
            assert 1 <= reset <= WINDOW_SECONDS + 1
            # Waiting Retry-After seconds is enough.
            clock.now += reset
            state, refusal = await counted(counter)
            assert state.allowed, (reset, served, clock.now)
            assert refusal is None
            served.append(clock.now)

    with mock.patch.object(time, "time", clock.time):
        asyncio.run(run())

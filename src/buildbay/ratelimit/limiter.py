"""Per-plan request limits over the `limits` library (moving 60-second window).

Counters live in memory for one process, or in Redis when BUILDBAY_REDIS_URL is set so that every
process shares them. If the counter store fails, requests are served anyway (fail open).
"""

from __future__ import annotations

import inspect
import logging
import math
import time
from dataclasses import dataclass

from limits import RateLimitItem, RateLimitItemPerMinute
from limits.aio.strategies import MovingWindowRateLimiter
from limits.storage import storage_from_string

from buildbay.config import Plan, Settings

log = logging.getLogger("buildbay.ratelimit")
WINDOW_SECONDS = 60
WARN_EVERY_SECONDS = 60


@dataclass(frozen=True, slots=True)
class RateLimitState:
    policy: str
    limit: int
    remaining: int
    reset_after: int  # seconds until a slot frees
    allowed: bool

    def headers(self) -> dict[str, str]:
        return {
            "RateLimit-Policy": f'"{self.policy}";q={self.limit};w={WINDOW_SECONDS}',
            "RateLimit": f'"{self.policy}";r={self.remaining};t={self.reset_after}',
        }


class RateLimiter:
    def __init__(self, settings: Settings) -> None:
        if settings.redis_url:
            self._storage = storage_from_string(
                f"async+{settings.redis_url}",
                implementation="redispy",
                socket_timeout=1,
                socket_connect_timeout=1,
            )
        else:
            self._storage = storage_from_string("async+memory://")
        self._limiter = MovingWindowRateLimiter(self._storage)
        self._enabled = settings.rate_limit_enabled
        self._plans: dict[Plan, RateLimitItem] = {}
        for plan in Plan:
            per_minute = settings.requests_per_minute(plan)
            if per_minute is not None:
                self._plans[plan] = RateLimitItemPerMinute(per_minute)
        self._login_failures = RateLimitItemPerMinute(settings.login_failures_per_minute)
        self._last_warning = 0.0
        self.degraded = False

    async def hit(self, key: str, plan: Plan) -> RateLimitState | None:
        """Count one request for `key`; None when the plan has no limit (or the store is down)."""
        item = self._plans.get(plan)
        if not self._enabled or item is None:
            return None
        try:
            allowed = await self._limiter.hit(item, "api", key)
            stats = await self._limiter.get_window_stats(item, "api", key)
        except Exception as exc:  # the counter store is down: serve the request anyway
            self._store_failed(exc)
            return None
        self.degraded = False
        wait = stats.reset_time - time.time()
        if allowed:
            remaining, reset_after = max(stats.remaining, 0), max(math.ceil(wait), 0)
        else:
            # The window counts a request until it is *more* than a window old, and its stats
            # already leave out one exactly that old: so nothing remains, and the retry that is
            # sure to pass comes in the first whole second after `wait`, not at its ceiling.
            remaining, reset_after = 0, max(math.floor(wait) + 1, 1)
        return RateLimitState(
            policy=plan.value,
            limit=item.amount,
            remaining=remaining,
            reset_after=reset_after,
            allowed=allowed,
        )

    async def login_retry_after(self, *keys: str) -> int | None:
        """Seconds to wait if any of these login-failure counters is spent, else None."""
        if not self._enabled:
            return None
        try:
            for key in keys:
                if not await self._limiter.test(self._login_failures, "login", key):
                    stats = await self._limiter.get_window_stats(self._login_failures, "login", key)
                    return max(math.ceil(stats.reset_time - time.time()), 1)
        except Exception as exc:
            self._store_failed(exc)
        return None

    async def count_login_failure(self, *keys: str) -> None:
        if not self._enabled:
            return
        try:
            for key in keys:
                await self._limiter.hit(self._login_failures, "login", key)
        except Exception as exc:
            self._store_failed(exc)

    async def check(self) -> bool:
        try:
            result = self._storage.check()
            return bool(await result if inspect.isawaitable(result) else result)
        except Exception:
            return False

    def _store_failed(self, exc: Exception) -> None:
        self.degraded = True
        now = time.monotonic()
        if now - self._last_warning >= WARN_EVERY_SECONDS:
            self._last_warning = now
            log.warning("rate-limit store unreachable, serving requests unlimited: %s", exc)

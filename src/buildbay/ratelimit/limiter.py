"""Per-plan request limits over the `limits` library (moving 60-second window).

Counters live in memory for one process, or in Redis when BUILDBAY_REDIS_URL is set so that every
process shares them. If the counter store fails, requests are served anyway (fail open), and
the requests of the next `redis_pool.SKIP_SECONDS` do not ask it.

The budgets that guard passwords and mail (failed logins and wrong current passwords, password
resets, verification mails) do not fail open: with Redis unreachable they count in this
process's memory instead (`_local`), so each process still holds each budget on its own (with N
processes behind a balancer, at most N times the budget gets through), and the log says so once
per outage. They ask Redis again after `redis_pool.SKIP_SECONDS`, and count there from the moment
it answers (what was counted in memory meanwhile stays in memory, and ages out there).

A request's count and the `RateLimit` header's remaining count come from one step. The library's
moving window answers a hit with a yes or no only, and its window stats with a second call: with
several processes, others' hits land between the two, so two requests read the same remaining
count, or one reads 0 while slots are left. In Redis the hit is therefore one script that
counts and answers the window (`_HIT_AND_COUNT`, the library's moving window with its answer
extended); in memory, one process's hit and read run under one lock.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as redis
from limits import RateLimitItem, RateLimitItemPerMinute
from limits.aio.storage import Storage as AsyncStorage
from limits.aio.strategies import MovingWindowRateLimiter
from limits.storage import storage_from_string

from buildbay import redis_pool
from buildbay.clock import Clock
from buildbay.config import Plan, Settings

log = logging.getLogger("buildbay.ratelimit")
WINDOW_SECONDS = 60


# KEYS[1]: a list of hit times, newest first, at most `limit` long. ARGV: now, limit, window.
# Answers {1 if counted else 0, hits in the window, the oldest of them} (times as strings: Lua
# numbers come back as integers). A hit exactly one window old still counts, as in `limits`.
_HIT_AND_COUNT = """
local now, limit, window = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local start = now - window
local last = redis.call('lindex', KEYS[1], limit - 1)
local counted = 0
if not last or tonumber(last) < start then
    redis.call('lpush', KEYS[1], ARGV[1])
    redis.call('ltrim', KEYS[1], 0, limit - 1)
    redis.call('expire', KEYS[1], window)
    counted = 1
end
local low, high, oldest = 0, redis.call('llen', KEYS[1]) - 1, -1
while low <= high do
    local middle = math.floor((low + high) / 2)
    if tonumber(redis.call('lindex', KEYS[1], middle)) >= start then
        oldest, low = middle, middle + 1
    else
        high = middle - 1
    end
end
if oldest < 0 then
    return {counted, 0, ARGV[1]}
end
return {counted, oldest + 1, redis.call('lindex', KEYS[1], oldest)}
"""
_REDIS_KEY = "buildbay:requests:"


@dataclass(frozen=True, slots=True)
class _Hit:
    allowed: bool
    remaining: int
    reset_time: float  # when the oldest hit in the window leaves it


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


def _in_flight_key(key: str) -> str:
    return f"buildbay/password-checks-in-flight/{key}"


@dataclass(slots=True)
class PasswordCheck:
    """The reservation of one password check (see RateLimiter.reserve_password_check): a
    wrong password keeps it as a counted failure, a right one gives it back."""

    limiter: RateLimiter
    reserved: list[str] = field(default_factory=list)
    retry_after: int | None = None  # set: throttled, nothing reserved
    local: bool = False  # reserved in this process's counters (Redis was unreachable)

    async def failed(self) -> None:
        """Count the failure, then give the reservation back (in that order: see above)."""
        keys, self.reserved = self.reserved, []
        await self.limiter.count_failure(keys, local=self.local)
        await self.limiter.release_reservation(keys, local=self.local)

    async def release(self) -> None:
        keys, self.reserved = self.reserved, []
        await self.limiter.release_reservation(keys, local=self.local)


class RateLimiter:
    def __init__(self, settings: Settings, clock: Clock, shared: redis.Redis | None = None) -> None:
        """`clock`: the app's, on which a failing Redis is left alone a while (redis_pool.py);
        `shared`: the process's Redis client (redis_pool.py), which its owner closes;
        needed when `settings` name a Redis."""
        self._redis: redis.Redis | None = None
        if settings.redis_url:
            if shared is None:
                raise ValueError("the counters live in Redis: pass the process's Redis client")
            self._redis = shared
            self._hit_and_count = self._redis.register_script(_HIT_AND_COUNT)
            # On the process's pool, bounded, with its timeouts, closed with it: `limits`
            # would otherwise open a pool of its own, unbounded and never closed. Its storage
            # documents `connection_pool`, though it types its options as plain values.
            pool: dict[str, Any] = {"connection_pool": shared.connection_pool}
            storage = storage_from_string(
                f"async+{settings.redis_url}", implementation="redispy", **pool
            )
        else:
            storage = storage_from_string("async+memory://")
        assert isinstance(storage, AsyncStorage)  # the `async+` schemes give the asyncio ones
        self._storage: AsyncStorage = storage
        self._limiter = MovingWindowRateLimiter(self._storage)
        # The password and mail budgets' counters while Redis is unreachable (see the module);
        # without Redis, the counters are these anyway.
        self._local_storage: AsyncStorage = self._storage
        if self._redis is not None:
            local = storage_from_string("async+memory://")
            assert isinstance(local, AsyncStorage)
            self._local_storage = local
        self._local_limiter = MovingWindowRateLimiter(self._local_storage)
        self._budgets_in_memory = False  # counting them locally since Redis failed them
        self._enabled = settings.rate_limit_enabled
        self._plans: dict[Plan, RateLimitItem] = {}
        for plan in Plan:
            per_minute = settings.requests_per_minute(plan)
            if per_minute is not None:
                self._plans[plan] = RateLimitItemPerMinute(per_minute)
        self._login_failures = RateLimitItemPerMinute(settings.login_failures_per_minute)
        self._budgets: dict[int, RateLimitItem] = {}
        self._in_memory = asyncio.Lock()
        self._setbacks = redis_pool.Setbacks(log, clock)  # requests are not counted while it skips
        self.degraded = False
        self.store_failures = 0  # operations the store did not answer (each served unlimited)

    async def hit(self, key: str, plan: Plan) -> RateLimitState | None:
        """Count one request for `key`; None when the plan has no limit (or the store is down)."""
        item = self._plans.get(plan)
        if not self._enabled or item is None:
            return None
        return await self._count(key, item, plan.value)

    async def hit_budget(self, key: str, per_minute: int, policy: str) -> RateLimitState | None:
        """Count one request for `key` against a budget of its own (not a plan's): `policy`
        names it in the RateLimit headers. None when limits are off (or the store is down)."""
        if not self._enabled:
            return None
        item = self._budgets.get(per_minute)
        if item is None:
            item = self._budgets[per_minute] = RateLimitItemPerMinute(per_minute)
        return await self._count(key, item, policy)

    async def _count(self, key: str, item: RateLimitItem, policy: str) -> RateLimitState | None:
        if self._setbacks.skipping():
            return None  # the store failed a moment ago: served uncounted, without asking it
        try:
            hit = await self._hit(item, key)
        except Exception as exc:  # the counter store is down: serve the request anyway
            self._setbacks.skip()
            self._store_failed(exc)
            return None
        self.degraded = False
        allowed = hit.allowed
        wait = hit.reset_time - time.time()
        if allowed:
            remaining, reset_after = max(hit.remaining, 0), max(math.ceil(wait), 0)
        else:
            # The window counts a request until it is *more* than a window old, and its stats
            # already leave out one exactly that old: so nothing remains, and the retry that is
            # sure to pass comes in the first whole second after `wait`, not at its ceiling.
            remaining, reset_after = 0, max(math.floor(wait) + 1, 1)
        return RateLimitState(
            policy=policy,
            limit=item.amount,
            remaining=remaining,
            reset_after=reset_after,
            allowed=allowed,
        )

    async def _hit(self, item: RateLimitItem, key: str) -> _Hit:
        """Count one request and read the window it left, in one step (see the module)."""
        if self._redis is None:
            async with self._in_memory:
                allowed = await self._limiter.hit(item, "api", key)
                stats = await self._limiter.get_window_stats(item, "api", key)
            return _Hit(allowed, stats.remaining, stats.reset_time)
        window = item.get_expiry()
        counted, in_window, oldest = await self._hit_and_count(
            keys=[_REDIS_KEY + item.key_for("api", key)],
            args=[repr(time.time()), item.amount, window],
        )
        return _Hit(bool(counted), item.amount - int(in_window), float(oldest) + window)

    async def reserve_password_check(self, *keys: str) -> PasswordCheck:
        """Reserve one password check in each of these failure budgets, before the password is
        checked: concurrent attempts see each other's reservations, so however many arrive at
        once, at most the budget's number are checked. `PasswordCheck.retry_after` set: one of
        the budgets is spent, nothing is reserved and the password must not be checked."""
        if not self._enabled:
            return PasswordCheck(self)
        if self._asks_redis():
            check = PasswordCheck(self)
            try:
                await self._reserve(check, keys)
            except Exception as exc:  # unreachable: this process's counters hold the budget
                await check.release()
                self._budgets_fell_back(exc)
            else:
                self._budgets_back()
                return check
        self._in_memory_now()
        check = PasswordCheck(self, local=True)
        await self._reserve(check, keys)  # in memory: nothing to fail
        return check

    async def _reserve(self, check: PasswordCheck, keys: tuple[str, ...]) -> None:
        storage, limiter = self._stores(local=check.local)
        for key in keys:
            # Taken first, then compared with the failures counted so far: a failure is
            # counted before its reservation is given back, so an attempt is never missing
            # from both counts (see PasswordCheck.failed).
            in_flight = await storage.incr(_in_flight_key(key), WINDOW_SECONDS)
            if in_flight < 1:
                # The counter expired under checks that were still running (it lives a
                # window from when it last left zero), and their releases took it below
                # zero: start it again rather than admit more than the budget.
                await storage.clear(_in_flight_key(key))
                in_flight = await storage.incr(_in_flight_key(key), WINDOW_SECONDS)
            check.reserved.append(key)
            stats = await limiter.get_window_stats(self._login_failures, "login", key)
            if in_flight > stats.remaining:
                await check.release()
                check.retry_after = max(math.ceil(stats.reset_time - time.time()), 1)
                return

    async def throttle(self, namespace: str, key: str, item: RateLimitItem) -> int | None:
        """Count one attempt of `key` against `item` (e.g. password-reset mails per e-mail):
        None if it is allowed, else the seconds to wait. With Redis unreachable, counted in
        this process's memory (see the module)."""
        if not self._enabled:
            return None
        if self._asks_redis():
            try:
                wait = await self._throttle(self._limiter, namespace, key, item)
            except Exception as exc:
                self._budgets_fell_back(exc)
            else:
                self._budgets_back()
                return wait
        self._in_memory_now()
        return await self._throttle(self._local_limiter, namespace, key, item)

    @staticmethod
    async def _throttle(
        limiter: MovingWindowRateLimiter, namespace: str, key: str, item: RateLimitItem
    ) -> int | None:
        if await limiter.hit(item, namespace, key):
            return None
        stats = await limiter.get_window_stats(item, namespace, key)
        return max(math.ceil(stats.reset_time - time.time()), 1)

    async def count_failure(self, keys: list[str], *, local: bool = False) -> None:
        if not local:
            try:
                for key in keys:
                    await self._limiter.hit(self._login_failures, "login", key)
                return
            except Exception as exc:  # counted here instead: a failure is never lost
                self._budgets_fell_back(exc)
        for key in keys:
            await self._local_limiter.hit(self._login_failures, "login", key)

    async def release_reservation(self, keys: list[str], *, local: bool = False) -> None:
        storage, _ = self._stores(local=local)
        try:
            for key in keys:
                await storage.incr(_in_flight_key(key), WINDOW_SECONDS, amount=-1)
        except Exception as exc:  # the reservation ages out with its counter (a window)
            self._budgets_fell_back(exc)

    def _stores(self, *, local: bool) -> tuple[AsyncStorage, MovingWindowRateLimiter]:
        if local:
            return self._local_storage, self._local_limiter
        return self._storage, self._limiter

    def _asks_redis(self) -> bool:
        """Whether the budgets ask Redis now (not: no Redis, or it failed a moment ago)."""
        return self._redis is not None and not self._setbacks.skipping()

    def _budgets_fell_back(self, exc: Exception) -> None:
        self.degraded = True
        self.store_failures += 1
        self._setbacks.skip()
        self._in_memory_now(exc)

    def _in_memory_now(self, exc: Exception | None = None) -> None:
        """A budget counts in this process's memory although the counters live in Redis: said
        in the log once an outage, not once per attempt."""
        if self._redis is None or self._budgets_in_memory:
            return
        self._budgets_in_memory = True
        log.warning(
            "rate-limit store unreachable%s: login, password-reset and verification-mail "
            "budgets now count in this process's memory, each process on its own, until it "
            "answers again",
            f" ({exc})" if exc is not None else "",
        )

    def _budgets_back(self) -> None:
        if self._budgets_in_memory:
            self._budgets_in_memory = False
            log.warning("rate-limit store answers again: login and reset budgets are shared again")

    async def check(self) -> bool:
        try:
            return bool(await self._storage.check())
        except Exception:
            return False

    def _store_failed(self, exc: Exception) -> None:
        self.degraded = True
        self.store_failures += 1
        self._setbacks.warn("rate-limit store unreachable, serving requests unlimited", exc)

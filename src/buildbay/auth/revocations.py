"""Revocations every process hears of at once, so that each can keep its access-token cache
(auth/cache.py) when there are several.

Each user has a revocation mark in Redis: a random value, replaced whenever one of the user's
sessions is revoked (logout, a password change, a reused refresh token) or a password reset
ends every credential of theirs, once the revoking transaction has committed and before its
response goes out. A cached access token keeps the
mark read before its session was looked up, and serves a request only while the mark is still
the same: one Redis GET instead of the token's signature check and a database query. From the
moment the revoking request answers, every process refuses the token.

If Redis cannot be reached, the mark is unknown and the cache is not used: the request looks its
session up in the database, as a process without the cache does; Redis is then left alone for
`redis_pool.SKIP_SECONDS`. A mark lives MARK_SECONDS, far longer than an entry stored before it
can (ACCESS_CACHE_TTL). Redis keeps nothing on disk: if it restarts within ACCESS_CACHE_TTL of a
revocation, the mark is gone, and an entry cached before the revocation may serve until its TTL.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Iterable

import redis.asyncio as redis

from buildbay import redis_pool
from buildbay.clock import Clock

log = logging.getLogger("buildbay.auth")

KEY = "buildbay:revocation-mark:"
MARK_SECONDS = 300
NO_REVOCATION = b""  # the mark of a user none of whose sessions was revoked lately


class SharedRevocations:
    def __init__(self, shared: redis.Redis, clock: Clock) -> None:
        """`shared`: the process's Redis client (redis_pool.py), which its owner closes;
        `clock`: the app's, on which a failing Redis is left alone a while."""
        self._redis = shared
        self._setbacks = redis_pool.Setbacks(log, clock)

    async def mark(self, user_id: str) -> bytes | None:
        """The user's revocation mark now; None if it cannot be known (Redis unreachable)."""
        if self._setbacks.skipping():
            return None
        try:
            mark = await self._redis.get(KEY + user_id)
        except (redis.RedisError, OSError) as exc:
            self._failed("cannot read revocation marks; tokens are looked up per request", exc)
            return None
        if mark is None:
            return NO_REVOCATION
        assert isinstance(mark, bytes)  # the client does not decode responses
        return mark

    async def announce(self, user_ids: Iterable[str]) -> None:
        """Give these users new marks: their sessions were revoked, in the database already.

        If Redis cannot be reached, the other processes cannot read marks either and look every
        token up; a cached entry could serve again only if Redis came back within
        ACCESS_CACHE_TTL of this failure.
        """
        try:
            async with self._redis.pipeline(transaction=False) as pipe:
                for user_id in set(user_ids):
                    pipe.set(KEY + user_id, secrets.token_bytes(16), ex=MARK_SECONDS)
                await pipe.execute()
        except (redis.RedisError, OSError) as exc:
            self._failed("cannot announce revoked sessions to the other processes", exc)

    def _failed(self, text: str, exc: BaseException) -> None:
        self._setbacks.skip()
        self._setbacks.warn(text, exc)

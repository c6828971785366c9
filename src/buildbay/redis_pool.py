"""The one Redis client of a process (with BUILDBAY_REDIS_URL): every request reads its user's
revocation mark (auth/revocations.py) and counts itself (ratelimit/) through it.

Its pool is bounded: a burst of requests takes turns on CONNECTIONS connections, each command
taking a fraction of a millisecond, where an unbounded pool opened a connection per concurrent
request (118 for a burst of 60 in tests/ratelimit/test_shared_counters.py), kept them all open
for good, and under load timed some of those connects out (the request then went uncounted).
Every wait is bounded by a second: a Redis that does not answer by then is treated as down, and
each user of the client then does without it (fails open).
"""

from __future__ import annotations

import redis.asyncio as redis

CONNECTIONS = 10
TIMEOUT_SECONDS = 1


def connect(url: str) -> redis.Redis:
    """A client of its own pool (closed with the client's `aclose`); it connects on first use."""
    return redis.Redis.from_pool(
        redis.BlockingConnectionPool.from_url(
            url,
            max_connections=CONNECTIONS,
            timeout=TIMEOUT_SECONDS,  # for a free connection
            socket_timeout=TIMEOUT_SECONDS,
            socket_connect_timeout=TIMEOUT_SECONDS,
        )
    )

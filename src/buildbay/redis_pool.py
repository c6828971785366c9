"""The one Redis client of a process (with BUILDBAY_REDIS_URL): every request reads its user's
revocation mark (auth/revocations.py) and counts itself (ratelimit/) through it.

Its pool is bounded: a burst of requests takes turns on CONNECTIONS connections, each command
taking a fraction of a millisecond, where an unbounded pool opened a connection per concurrent
request (118 for a burst of 60 in tests/ratelimit/test_shared_counters.py), kept them all open
for good, and under load timed some of those connects out (the request then went uncounted).
A connect or a command that takes over TIMEOUT_SECONDS counts as Redis being down, and each user
of the client then does without it (fails open). The wait for a free connection is longer,
WAIT_SECONDS: a connection is held while the event loop serves other requests between the
command and its reply, which on a loaded machine can take most of a second for a burst; while
Redis hangs without refusing, a request may wait that long before it is served without Redis.
"""

from __future__ import annotations

import redis.asyncio as redis

CONNECTIONS = 10
TIMEOUT_SECONDS = 1
WAIT_SECONDS = 3


def connect(url: str) -> redis.Redis:
    """A client of its own pool (closed with the client's `aclose`); it connects on first use."""
    return redis.Redis.from_pool(
        redis.BlockingConnectionPool.from_url(
            url,
            max_connections=CONNECTIONS,
            timeout=WAIT_SECONDS,  # for a free connection
            socket_timeout=TIMEOUT_SECONDS,
            socket_connect_timeout=TIMEOUT_SECONDS,
        )
    )

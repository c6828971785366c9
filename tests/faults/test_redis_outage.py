"""Redis, which holds the rate-limit counters, dies under traffic and comes back."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.faults.conftest import Outcome, PrivateRedis, Server, Traffic, wait_for
from tests.processes import Uploader

pytestmark = [pytest.mark.slow, pytest.mark.faults]


def _ok(outcome: Outcome) -> bool:
    return outcome.status is not None and 200 <= outcome.status < 300


def _store(http: httpx.Client) -> str:
    r = http.get("/readyz")
    assert r.status_code == 200, r.text  # Redis is never a reason to take the process out
    state: str = r.json()["checks"]["rateLimitStore"]
    return state


def test_redis_dying_under_traffic_fails_open_and_counting_resumes_when_it_returns(
    private_redis: PrivateRedis, server_env: dict[str, str], servers: Callable[..., Server]
) -> None:
    """Catches: a Redis error escaping as 500 or 503, or a request hanging on it; rate limits
    that fail closed (429 for everyone); /readyz failing over counters; a connection pool that
    does not reconnect, so that requests go uncounted for good after Redis returns."""
    env = dict(server_env, BUILDBAY_REDIS_URL=private_redis.url)
    env["BUILDBAY_RATE_LIMIT_FREE_PER_MINUTE"] = "100000"  # counted, never reached
    server = servers(env).start()
    with httpx.Client(base_url=server.base, timeout=30) as http:
        user = Uploader.sign_up(http)

        def login(client: httpx.Client) -> httpx.Response:
            body = {"email": "ci@example.com", "password": "a long password"}
            return client.post("/api/auth/login", json=body)

        requests: list[tuple[str, Callable[[httpx.Client], Any]]] = [
            ("list", lambda client: client.get("/api/projects", headers=user.headers)),
            ("upload", user.upload_small),
            ("login", login),
            ("builds", lambda client: client.get(user.base, headers=user.headers)),
        ]
        with Traffic(server.base, requests) as traffic:
            wait_for(lambda: traffic.count(_ok) >= 8, "traffic to flow")
            assert _store(http) == "ok"
            assert all(o.rate_limit for o in traffic.outcomes if o.label == "list")

            private_redis.kill()
            wait_for(lambda: _store(http) == "degraded", "/readyz to report the store degraded")
            # Marked by when a request was sent, not by when its answer came: a request
            # counted just before the kill may answer after /readyz reported it.
            mark = time.monotonic()
            wait_for(
                lambda: sum(_ok(o) for o in traffic.since(mark)) >= 8,
                "requests to keep succeeding without Redis",
            )
            unlimited = [o for o in traffic.since(mark) if o.label == "list"]
            assert unlimited
            assert all(o.rate_limit is None for o in unlimited)  # served, uncounted

            private_redis.start()  # the same port, empty
            wait_for(lambda: _store(http) == "ok", "/readyz to see the store again")
            mark = time.monotonic()
            wait_for(
                lambda: sum(bool(o.rate_limit) for o in traffic.since(mark)) >= 4,
                "requests to be counted again",
            )
        counted = [o for o in traffic.since(mark) if o.label == "list"]
        assert counted[-1].rate_limit

    bad = [o for o in traffic.outcomes if not _ok(o)]
    assert bad == [], bad[:10]
    assert traffic.count(lambda o: o.label == "upload") >= 3
    assert server.alive()
    assert server.starts == 1

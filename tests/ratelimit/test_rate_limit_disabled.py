"""rate_limit_enabled=False: no counting, no headers, no login throttling."""

from __future__ import annotations

import httpx
import pytest

from buildbay.config import Settings
from tests.conftest import Account, assert_problem


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return settings.model_copy(update={"rate_limit_enabled": False})


async def test_with_rate_limits_disabled_a_user_is_never_refused_and_gets_no_headers(
    client: httpx.AsyncClient, owner: Account
) -> None:
    for _ in range(110):
        r = await client.get("/api/auth/me", headers=owner.headers)
        assert r.status_code == 200, r.text
        assert "RateLimit" not in r.headers
        assert "RateLimit-Policy" not in r.headers


async def test_with_rate_limits_disabled_anonymous_requests_are_not_counted(
    client: httpx.AsyncClient,
) -> None:
    for _ in range(110):
        r = await client.get("/api/auth/me")
        assert_problem(r, 401, "not_authenticated")
        assert "RateLimit" not in r.headers


async def test_with_rate_limits_disabled_failed_logins_are_not_throttled(
    client: httpx.AsyncClient, owner: Account
) -> None:
    for i in range(12):
        r = await client.post("/api/auth/login", json={"email": owner.email, "password": f"x{i}"})
        assert_problem(r, 401, "invalid_credentials")

    r = await client.post(
        "/api/auth/login", json={"email": owner.email, "password": owner.password}
    )
    assert r.status_code == 200, r.text

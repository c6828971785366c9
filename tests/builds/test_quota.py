"""The per-plan storage quota: upload-link refuses a build that would pass it (413
`quota_exceeded`), pending builds count from their link on until it expires, and /api/auth/me
shows the usage."""

from __future__ import annotations

from typing import Any

import pytest

from buildbay.config import Settings
from tests.builds.conftest import Builds
from tests.conftest import FrozenClock, assert_problem

QUOTA = 100


@pytest.fixture
def settings(settings: Settings) -> Settings:
    settings.quota_bytes_free = QUOTA
    return settings


async def _me(builds: Builds) -> dict[str, Any]:
    r = await builds.client.get("/api/auth/me", headers=builds.owner.headers)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


async def test_a_build_that_would_pass_the_quota_is_refused(builds: Builds) -> None:
    ready = await builds.ready(b"r" * 60)
    pending = await builds.link(b"p" * 30)  # reserved from its link on
    assert (await _me(builds))["usage"] == {"storageBytes": 90, "builds": 2}
    assert (await _me(builds))["limits"]["storageQuotaBytes"] == QUOTA

    problem = assert_problem(
        await builds.request_link({"fileName": "big.apk", "fileSize": 11}), 413, "quota_exceeded"
    )
    assert "past the free plan's 100 bytes" in problem["detail"]
    assert (await builds.request_link({"fileName": "fits.apk", "fileSize": 10})).status_code == 201

    # Deleting builds gives the room back.
    for build_id in (ready["buildId"], pending["buildId"]):
        r = await builds.client.delete(f"{builds.base}/{build_id}", headers=builds.owner.headers)
        assert r.status_code == 204
    assert (await _me(builds))["usage"] == {"storageBytes": 10, "builds": 1}
    assert (await builds.request_link({"fileName": "big.apk", "fileSize": 90})).status_code == 201


async def test_a_pending_build_whose_link_expired_no_longer_counts(
    builds: Builds, clock: FrozenClock
) -> None:
    await builds.ready(b"r" * 60)
    await builds.link(b"p" * 30)  # never sent: its link expires
    assert (await _me(builds))["usage"]["storageBytes"] == 90

    clock.advance(hours=1, seconds=1)  # past the link; the sweeper removes it later

    assert (await _me(builds))["usage"] == {"storageBytes": 60, "builds": 1}
    assert (await builds.request_link({"fileName": "fits.apk", "fileSize": 40})).status_code == 201


async def test_zero_means_no_quota(builds: Builds, settings: Settings) -> None:
    settings.quota_bytes_free = 0
    await builds.ready(b"x" * 200)
    assert (await builds.request_link({"fileName": "a.apk", "fileSize": 500})).status_code == 201
    assert (await _me(builds))["limits"]["storageQuotaBytes"] is None


async def test_the_rate_limit_shown_is_none_when_rate_limiting_is_off(
    builds: Builds, settings: Settings
) -> None:
    settings.rate_limit_enabled = False
    assert (await _me(builds))["limits"]["requestsPerMinute"] is None

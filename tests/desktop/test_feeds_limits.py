"""The feeds count against the update check's budgets: one application's feeds and checks
share its per-minute budget, and past it every one of them is 429 with Retry-After. The files
they point at count per client IP, in a budget of their own."""

from __future__ import annotations

import pytest

from buildbay.config import Settings
from tests.builds.conftest import Builds
from tests.conftest import assert_problem
from tests.desktop import files

PER_KEY = 4
DOWNLOADS_PER_IP = 3


@pytest.fixture
def settings(settings: Settings) -> Settings:
    settings.update_checks_per_minute_per_key = PER_KEY
    settings.update_checks_per_minute_per_ip = 1000
    settings.install_pages_per_minute_per_ip = DOWNLOADS_PER_IP
    return settings


async def _macos_app_with_a_build(builds: Builds) -> tuple[str, str]:
    """The application made macOS, with one ready build A.dmg: its update key and the build."""
    r = await builds.client.put(
        f"/api/projects/{builds.project_id}/applications/{builds.app_id}",
        json={"platform": "macos"},
        headers=builds.owner.headers,
    )
    link = await builds.link(files.dmg(), fileName="A.dmg")
    await builds.put(link, files.dmg())
    verified = await builds.verify(link["buildId"], version="1.0", buildNumber="1")
    assert verified.status_code == 200, verified.text
    return r.json()["updateKey"], link["buildId"]


async def test_feeds_and_update_checks_share_the_application_s_budget(builds: Builds) -> None:
    key, _ = await _macos_app_with_a_build(builds)
    paths = [
        f"/feeds/{key}/electron/latest-mac.yml",
        f"/feeds/{key}/sparkle/default.xml",
        f"/api/updates/check?key={key}&versionName=0.9",
        f"/feeds/{key}/sparkle/default.xml",
    ]
    for path in paths:
        assert (await builds.client.get(path)).status_code == 200, path
    for path in paths[:3]:
        r = await builds.client.get(path)
        assert_problem(r, 429, "rate_limited")
        assert "updates-key" in r.json()["detail"]
        assert int(r.headers["retry-after"]) > 0


async def test_feed_downloads_count_per_client_ip_in_a_budget_of_their_own(
    builds: Builds,
) -> None:
    key, build_id = await _macos_app_with_a_build(builds)
    address = f"/feeds/{key}/download/{build_id}/A.dmg"
    for _ in range(DOWNLOADS_PER_IP):
        r = await builds.client.get(address, headers={"Range": "bytes=0-9"})
        assert r.status_code == 206
    r = await builds.client.get(address, headers={"Range": "bytes=0-9"})
    assert_problem(r, 429, "rate_limited")
    assert "feed downloads" in r.json()["detail"]
    assert int(r.headers["retry-after"]) > 0
    # The feed itself is counted apart (the update check's budgets).
    assert (await builds.client.get(f"/feeds/{key}/sparkle/default.xml")).status_code == 200

"""The feeds count against the update check's budgets: one application's feeds and checks
share its per-minute budget, and past it every one of them is 429 with Retry-After."""

from __future__ import annotations

import pytest

from buildbay.config import Settings
from tests.builds.conftest import Builds
from tests.conftest import assert_problem
from tests.desktop import files

PER_KEY = 4


@pytest.fixture
def settings(settings: Settings) -> Settings:
    settings.update_checks_per_minute_per_key = PER_KEY
    settings.update_checks_per_minute_per_ip = 1000
    return settings


async def test_feeds_and_update_checks_share_the_application_s_budget(builds: Builds) -> None:
    r = await builds.client.put(
        f"/api/projects/{builds.project_id}/applications/{builds.app_id}",
        json={"platform": "macos"},
        headers=builds.owner.headers,
    )
    key = r.json()["updateKey"]
    link = await builds.link(files.dmg(), fileName="A.dmg")
    await builds.put(link, files.dmg())
    r = await builds.verify(link["buildId"], version="1.0", buildNumber="1")
    assert r.status_code == 200, r.text
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

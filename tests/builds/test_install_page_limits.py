"""Install pages have a per-IP budget of their own, well above the API's for anonymous callers
(a team of testers behind one office NAT opens them at once), and a browser that spends it gets
a page that says when to try again, not problem+json."""

from __future__ import annotations

import pytest

from buildbay.config import Settings
from tests.builds.android_files import APK
from tests.builds.conftest import Builds
from tests.builds.test_install_links import HTML, _install_link, _path, _ready
from tests.conftest import assert_problem

BUDGET = 3


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return settings.model_copy(update={"install_pages_per_minute_per_ip": BUDGET})


async def test_a_spent_budget_is_a_page_for_a_browser_and_a_problem_for_a_program(
    builds: Builds,
) -> None:
    build = await _ready(builds, APK.read_bytes(), "app-release.apk")
    r = await _install_link(builds, build["buildId"])
    assert r.status_code == 201, r.text
    page = _path(r.json()["url"])
    for _ in range(BUDGET):
        opened = await builds.client.get(page, headers=HTML)
        assert opened.status_code == 200, opened.text
    # Counted against the pages' own budget, not the API's "free" one for anonymous callers.
    assert opened.headers["ratelimit-policy"] == f'"install-pages";q={BUDGET};w=60'

    refused = await builds.client.get(page, headers=HTML)
    assert refused.status_code == 429
    assert refused.headers["content-type"].startswith("text/html")
    assert int(refused.headers["retry-after"]) >= 1
    assert "Too many requests right now" in refused.text
    assert f"Try again in {refused.headers['retry-after']} seconds." in refused.text
    assert refused.headers["cache-control"] == "no-store"

    download = await builds.client.get(f"{page}/download")
    assert_problem(download, 429, "rate_limited")

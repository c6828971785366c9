"""The feeds' cache (feeds/cache.py): a feed and a download address answer from memory, and
every change a team makes through Buildbay shows in the next request, in this process (here)
and in the others (tests/test_scale_out.py). Each test reads what it then changes first, so
that the answer it changes is the one remembered."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import yaml
from fastapi import FastAPI
from sqlalchemy import update

from buildbay.builds.models import Build
from buildbay.clock import FrozenClock
from buildbay.config import Settings
from buildbay.feeds.cache import TTL, FeedCache
from buildbay.feeds.sparkle import INTERVAL_GRANULARITY
from tests.builds.conftest import Builds
from tests.conftest import assert_problem
from tests.desktop import files
from tests.desktop.test_feeds import _appcast, _platform, _ready, _s, _text, _yaml

ELECTRON = "electron/latest-mac.yml"
SPARKLE = "sparkle/default.xml"


@pytest.fixture
def settings(settings: Settings) -> Settings:
    settings.rate_limit_enabled = False
    return settings


def _address(key: str, build: dict[str, Any]) -> str:
    return f"/feeds/{key}/download/{build['buildId']}/{build['fileName']}"


async def _mac_app(builds: Builds) -> tuple[str, dict[str, Any]]:
    key = await _platform(builds, "macos")
    build = await _ready(builds, files.dmg(), "A-1.0.dmg", version="1.0", buildNumber="1")
    return key, build


async def _feeds(builds: Builds, key: str) -> tuple[dict[str, Any], str]:
    electron = await _yaml(builds.client, key, "latest-mac.yml")
    sparkle = await builds.client.get(f"/feeds/{key}/{SPARKLE}")
    assert sparkle.status_code == 200, sparkle.text
    return electron, sparkle.text


async def test_a_change_made_outside_buildbay_shows_once_the_entry_is_a_minute_old(
    app: FastAPI, builds: Builds, clock: FrozenClock
) -> None:
    """What makes the cache worth having, and shows it is used: a change the API's units of
    work do not make (SQL from outside) is not seen until the entry's TTL has passed."""
    key, build = await _mac_app(builds)
    before, _ = await _feeds(builds, key)
    assert before["sha512"]
    async with app.state.ctx.engine.begin() as connection:  # not a unit of work: unseen
        await connection.execute(
            update(Build).where(Build.id == build["buildId"]).values(notes="written by hand")
        )
    assert await _yaml(builds.client, key, "latest-mac.yml") == before
    clock.advance(seconds=TTL.total_seconds())
    assert (await _yaml(builds.client, key, "latest-mac.yml"))["releaseNotes"] == (
        "written by hand"
    )


async def test_a_new_build_rollout_notes_and_name_show_at_once(builds: Builds) -> None:
    key, first = await _mac_app(builds)
    await _feeds(builds, key)

    second = await _ready(builds, files.dmg(5000), "A-2.0.dmg", version="2.0", buildNumber="2")
    electron, sparkle = await _feeds(builds, key)
    assert electron["version"] == "2.0"
    assert second["buildId"] in sparkle

    r = await builds.client.put(
        f"{builds.base}/{second['buildId']}/channels",
        json={"channels": ["default"], "rolloutPercent": 30},
        headers=builds.owner.headers,
    )
    assert r.status_code == 200, r.text
    electron, sparkle = await _feeds(builds, key)
    assert electron["stagingPercentage"] == 30
    assert "phasedRolloutInterval" in sparkle

    r = await builds.client.put(
        f"{builds.base}/{second['buildId']}",
        json={"notes": "Now with notes"},
        headers=builds.owner.headers,
    )
    assert r.status_code == 200, r.text
    electron, sparkle = await _feeds(builds, key)
    assert electron["releaseNotes"] == "Now with notes"
    assert "Now with notes" in sparkle

    r = await builds.client.put(
        f"/api/projects/{builds.project_id}/applications/{builds.app_id}",
        json={"name": "Renamed"},
        headers=builds.owner.headers,
    )
    assert r.status_code == 200, r.text
    root = _appcast(await builds.client.get(f"/feeds/{key}/{SPARKLE}"))
    assert root.findtext("channel/title") == "Renamed (default)"
    assert first["buildId"] in (await builds.client.get(f"/feeds/{key}/{SPARKLE}")).text


async def test_an_address_stops_opening_once_its_build_is_unpublished_or_deleted(
    builds: Builds,
) -> None:
    key, build = await _mac_app(builds)
    assert (await builds.client.get(_address(key, build))).status_code == 200
    channels = f"{builds.base}/{build['buildId']}/channels"

    r = await builds.client.put(channels, json={"channels": []}, headers=builds.owner.headers)
    assert r.status_code == 200, r.text
    assert_problem(await builds.client.get(_address(key, build)), 404, "build_not_published")
    r = await builds.client.get(f"/feeds/{key}/{ELECTRON}")
    assert_problem(r, 404, "no_build")

    r = await builds.client.put(
        channels, json={"channels": ["default"]}, headers=builds.owner.headers
    )
    assert r.status_code == 200, r.text
    assert (await builds.client.get(_address(key, build))).status_code == 200
    assert (await _yaml(builds.client, key, "latest-mac.yml"))["version"] == "1.0"

    deleted = await builds.client.delete(
        f"{builds.base}/{build['buildId']}", headers=builds.owner.headers
    )
    assert deleted.status_code == 204, deleted.text
    assert_problem(await builds.client.get(_address(key, build)), 404, "unknown_build")
    assert_problem(await builds.client.get(f"/feeds/{key}/{ELECTRON}"), 404, "no_build")


async def test_a_rotated_key_ends_at_its_expiry_even_when_remembered(
    builds: Builds, clock: FrozenClock
) -> None:
    old, build = await _mac_app(builds)
    r = await builds.client.post(
        f"/api/projects/{builds.project_id}/applications/{builds.app_id}/update-key",
        headers=builds.owner.headers,
    )
    assert r.status_code == 200, r.text
    clock.advance(days=7, seconds=-10)
    await _feeds(builds, old)  # remembered now, 10 s before the key's end
    assert (await builds.client.get(_address(old, build))).status_code == 200
    clock.advance(seconds=20)
    for path in (ELECTRON, SPARKLE):
        assert_problem(await builds.client.get(f"/feeds/{old}/{path}"), 404, "unknown_update_key")
    assert_problem(await builds.client.get(_address(old, build)), 404, "unknown_update_key")


async def test_a_phased_rollout_s_interval_moves_on_while_the_appcast_is_remembered(
    app: FastAPI, builds: Builds, clock: FrozenClock
) -> None:
    key, build = await _mac_app(builds)
    r = await builds.client.put(
        f"{builds.base}/{build['buildId']}/channels",
        json={"channels": ["default"], "rolloutPercent": 50},
        headers=builds.owner.headers,
    )
    assert r.status_code == 200, r.text
    step = INTERVAL_GRANULARITY

    async def interval() -> int:
        root = _appcast(await builds.client.get(f"/feeds/{key}/{SPARKLE}"))
        return int(_text(root.find("channel/item"), _s("phasedRolloutInterval")) or "0")

    clock.advance(hours=1, seconds=step // 2)  # halfway through a step of the interval
    first = await interval()
    # Within the same step, the same appcast; past it, the next interval, although the appcast
    # read first is still within its TTL.
    clock.advance(seconds=step // 4)
    assert await interval() == first
    clock.advance(seconds=step // 2)
    assert step // 4 + step // 2 < TTL.total_seconds()
    assert await interval() > first


async def test_a_feed_that_is_not_there_yet_appears_at_once(builds: Builds) -> None:
    key = await _platform(builds, "macos")
    assert_problem(await builds.client.get(f"/feeds/{key}/{ELECTRON}"), 404, "no_build")
    await _ready(builds, files.dmg(), "A-1.0.dmg", version="1.0", buildNumber="1")
    body = yaml.safe_load((await builds.client.get(f"/feeds/{key}/{ELECTRON}")).text)
    assert body["version"] == "1.0"


async def test_what_changes_no_feed_leaves_the_feeds_remembered(
    app: FastAPI, builds: Builds
) -> None:
    """An update check that makes the build's install link locks the build's row (on SQLite an
    UPDATE that sets nothing) and writes a link: the feeds are not read anew for it."""
    key, build = await _mac_app(builds)
    before, _ = await _feeds(builds, key)
    async with app.state.ctx.engine.begin() as connection:  # unseen: shows what is re-read
        await connection.execute(
            update(Build).where(Build.id == build["buildId"]).values(notes="written by hand")
        )
    r = await builds.client.get(
        "/api/updates/check", params={"key": key, "versionName": "0.9", "platform": "macos"}
    )
    assert r.status_code == 200, r.text
    assert r.json()["updateAvailable"] is True
    assert r.json()["build"]["installUrl"]  # a link made in the check's unit of work
    assert await _yaml(builds.client, key, "latest-mac.yml") == before


async def test_askers_at_once_wait_for_one_reading_and_a_failed_one_leaves_each_to_read(
    clock: FrozenClock,
) -> None:
    cache = FeedCache(clock)
    mark = await cache.mark()
    readings = 0
    release = asyncio.Event()

    async def read() -> tuple[str, None]:
        nonlocal readings
        readings += 1
        await release.wait()
        return "the feed", None

    askers = [asyncio.create_task(cache.remembered("feed", mark, read)) for _ in range(50)]
    await asyncio.sleep(0)
    release.set()
    assert await asyncio.gather(*askers) == ["the feed"] * 50
    assert readings == 1
    assert await cache.remembered("feed", mark, read) == "the feed"  # stored
    assert readings == 1

    async def fail() -> tuple[str, None]:
        nonlocal readings
        readings += 1
        await asyncio.sleep(0)
        raise RuntimeError("the database went away")

    async def ask_after_the_first() -> str:
        await asyncio.sleep(0)  # the first asker is reading by now
        return await cache.remembered("other", mark, read)

    first = asyncio.create_task(cache.remembered("other", mark, fail))
    second = asyncio.create_task(ask_after_the_first())
    with pytest.raises(RuntimeError):
        await first
    assert await second == "the feed"  # read by itself, not told of the first's failure
    assert readings == 3

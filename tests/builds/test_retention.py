"""Retention: per application, the sweeper deletes ready builds beyond `keepLast` or older than
`keepDays`, with their bytes, and never the newest ready build."""

from __future__ import annotations

from typing import Any

import httpx
from fastapi import FastAPI

from buildbay.builds.sweeper import Swept, sweep
from buildbay.clock import FrozenClock
from tests.builds import test_sweeper
from tests.builds.conftest import Builds
from tests.conftest import assert_problem

app = test_sweeper.app  # the sweep's fixture: both storage backends


async def _days_later(builds: Builds, clock: FrozenClock, days: int) -> None:
    """Time passes; the owner's day-long access token is swapped for an API token first."""
    r = await builds.client.post(
        "/api/account/api-tokens", json={"name": "ci"}, headers=builds.owner.headers
    )
    assert r.status_code == 201, r.text
    builds.owner.access_token = r.json()["token"]
    clock.advance(days=days)


async def _rule(builds: Builds, retention: Any) -> httpx.Response:
    return await builds.client.put(
        f"/api/projects/{builds.project_id}/applications/{builds.app_id}",
        json={"retention": retention},
        headers=builds.owner.headers,
    )


async def _sweep(app: FastAPI, clock: FrozenClock) -> Swept:
    ctx = app.state.ctx
    return await sweep(ctx.sessions, ctx.storage, clock.now(), ctx.settings.resolved_public_url)


async def _ids(builds: Builds, **params: str) -> list[str]:
    r = await builds.client.get(builds.base, params=params, headers=builds.owner.headers)
    return [b["buildId"] for b in r.json()["builds"]]


async def test_keep_last_deletes_older_ready_builds_with_their_bytes(
    builds: Builds, app: FastAPI, clock: FrozenClock
) -> None:
    made = [await builds.ready(f"build {i}".encode()) for i in range(5)]
    pending = await builds.pending(b"not verified yet")
    r = await _rule(builds, {"keepLast": 2})
    assert r.status_code == 200, r.text
    assert r.json()["retention"] == {
        "keepLast": 2,
        "keepDays": None,
        "protect": {"groups": True, "channels": True},
    }

    swept = await _sweep(app, clock)

    assert swept.retention == 3
    newest = [b["buildId"] for b in reversed(made[-2:])]
    assert await _ids(builds) == newest
    assert await _ids(builds, status="pending") == [pending["buildId"]]  # not counted
    for build in made[:3]:
        assert_problem(await builds.get(build["buildId"]), 404, "build_not_found")
        assert (
            await builds.storage.stat(f"{builds.project_id}/{builds.app_id}/{build['buildId']}")
            is None
        )
    assert (await _sweep(app, clock)).retention == 0


async def test_keep_days_deletes_old_builds_but_never_the_newest(
    builds: Builds, app: FastAPI, clock: FrozenClock
) -> None:
    old = await builds.ready(b"old")
    await _days_later(builds, clock, 10)
    newest_old = await builds.ready(b"also old")
    await _rule(builds, {"keepDays": 3})
    clock.advance(days=5)

    assert (await _sweep(app, clock)).retention == 1  # both are too old; the newest stays

    assert await _ids(builds) == [newest_old["buildId"]]
    fresh = await builds.ready(b"fresh")
    assert (await _sweep(app, clock)).retention == 1
    assert await _ids(builds) == [fresh["buildId"]]
    assert old["buildId"] not in await _ids(builds)


async def test_without_a_rule_nothing_is_deleted_and_null_clears_it(
    builds: Builds, app: FastAPI, clock: FrozenClock
) -> None:
    for i in range(3):
        await builds.ready(f"b{i}".encode())
    await _rule(builds, {"keepLast": 1})
    r = await _rule(builds, None)
    assert r.json()["retention"] == {
        "keepLast": None,
        "keepDays": None,
        "protect": {"groups": True, "channels": True},
    }
    await _days_later(builds, clock, 3650)

    assert (await _sweep(app, clock)).retention == 0
    assert len(await _ids(builds)) == 3


async def test_a_bad_rule_is_a_validation_error(builds: Builds) -> None:
    for bad in ({"keepLast": 0}, {"keepDays": -1}, {"keepLast": "5"}, {"keep": 3}):
        assert_problem(await _rule(builds, bad), 422, "validation_error")

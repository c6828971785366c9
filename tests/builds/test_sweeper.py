"""The periodic sweep of pending builds whose upload link expired without a verify."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta

import pytest
from fastapi import FastAPI
from sqlalchemy import delete

from buildbay.app import create_app
from buildbay.builds import sweeper
from buildbay.builds.models import Build
from buildbay.builds.sweeper import GRACE, sweep_expired_uploads
from buildbay.clock import FrozenClock
from buildbay.config import Settings
from buildbay.storage.s3 import S3Storage
from tests.builds.conftest import Builds
from tests.conftest import S3_REGION, S3Server, assert_problem

LINK_TTL = timedelta(hours=1)


@pytest.fixture(params=["local", "s3"])
async def app(
    request: pytest.FixtureRequest, settings: Settings, clock: FrozenClock
) -> AsyncIterator[FastAPI]:
    """The sweep runs on both backends: bytes in local files or in a bucket."""
    storage = None
    if request.param == "s3":
        s3: S3Server = request.getfixturevalue("s3_server")
        storage = S3Storage(
            s3.new_bucket(), endpoint_url=s3.endpoint_url, region=S3_REGION, clock=clock.now
        )
    application = create_app(settings, clock=clock, storage=storage, migrate_on_start=False)
    yield application
    await application.state.ctx.dispose()


async def sweep(app: FastAPI, clock: FrozenClock) -> int:
    ctx = app.state.ctx
    return await sweep_expired_uploads(ctx.sessions, ctx.storage, clock.now())


async def test_sweep_removes_an_expired_pending_build_with_its_bytes(
    builds: Builds, app: FastAPI, clock: FrozenClock
) -> None:
    link = await builds.pending(b"abandoned upload")
    clock.advance(seconds=(LINK_TTL + GRACE).total_seconds() + 1)

    swept = await sweep(app, clock)

    assert swept == 1
    assert_problem(await builds.get(link["buildId"]), 404, "build_not_found")
    assert await builds.storage.stat(builds.key_of(link)) is None


async def test_sweep_removes_an_expired_build_whose_bytes_never_came(
    builds: Builds, app: FastAPI, clock: FrozenClock
) -> None:
    link = await builds.link()
    clock.advance(seconds=(LINK_TTL + GRACE).total_seconds() + 1)

    assert await sweep(app, clock) == 1
    assert_problem(await builds.get(link["buildId"]), 404, "build_not_found")


async def test_sweep_spares_a_pending_build_within_the_grace_period(
    builds: Builds, app: FastAPI, clock: FrozenClock
) -> None:
    link = await builds.pending()
    clock.advance(seconds=(LINK_TTL + GRACE).total_seconds() - 1)

    assert await sweep(app, clock) == 0
    assert (await builds.get(link["buildId"])).json()["status"] == "pending"
    assert await builds.storage.stat(builds.key_of(link)) is not None


async def test_sweep_never_touches_ready_or_fresh_pending_builds(
    builds: Builds, app: FastAPI, clock: FrozenClock
) -> None:
    ready = await builds.ready(b"a ready build")
    abandoned = await builds.pending(b"abandoned")
    clock.advance(hours=3)
    fresh = await builds.pending(b"fresh upload")

    swept = await sweep(app, clock)

    assert swept == 1
    assert_problem(await builds.get(abandoned["buildId"]), 404, "build_not_found")
    r = await builds.get(ready["buildId"])
    assert r.status_code == 200, r.text
    assert r.json() == ready
    r = await builds.client.get(ready["downloadUrl"], headers=builds.owner.headers)
    assert (await builds.uploader.get(r.headers["location"])).content == b"a ready build"
    assert (await builds.get(fresh["buildId"])).json()["status"] == "pending"
    assert await builds.storage.stat(builds.key_of(fresh)) is not None
    r = await builds.verify(fresh["buildId"])
    assert r.status_code == 200, r.text


async def test_sweep_works_through_more_builds_than_one_batch(
    builds: Builds, app: FastAPI, clock: FrozenClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sweeper, "BATCH", 2)
    links = [await builds.pending(f"abandoned {i}".encode()) for i in range(5)]
    clock.advance(hours=3)

    assert await sweep(app, clock) == 5
    assert await sweep(app, clock) == 0
    for link in links:
        assert_problem(await builds.get(link["buildId"]), 404, "build_not_found")
        assert await builds.storage.stat(builds.key_of(link)) is None


async def test_sweep_removes_stored_bytes_that_no_build_owns_once_they_are_old(
    builds: Builds, app: FastAPI, clock: FrozenClock
) -> None:
    """What a crash between a delete's commit and its file removal leaves (or, on S3, a PUT to a
    deleted build's URL): bytes without a row. Kept through the grace period, then removed;
    the bytes of builds, ready or pending, are never touched."""
    ready = await builds.ready(b"a ready build")
    pending = await builds.pending(b"a pending build")
    orphan = await builds.ready(b"a deleted build")
    async with app.state.ctx.sessions() as db, db.begin():
        await db.execute(delete(Build).where(Build.id == orphan["buildId"]))
    ctx = app.state.ctx
    orphan_key = builds.key_of({"buildId": orphan["buildId"]})

    assert await sweeper.sweep_orphan_objects(ctx.sessions, ctx.storage, clock.now()) == 0
    assert await builds.storage.stat(orphan_key) is not None  # within the grace period
    clock.advance(seconds=GRACE.total_seconds() + 60)
    swept = await sweeper.sweep(
        ctx.sessions, ctx.storage, clock.now(), ctx.settings.resolved_public_url
    )

    assert swept.orphan_objects == 1
    assert await builds.storage.stat(orphan_key) is None
    for build in (ready, pending):
        assert await builds.storage.stat(builds.key_of(build)) is not None
    r = await builds.client.get(ready["downloadUrl"], headers=builds.owner.headers)
    assert (await builds.uploader.get(r.headers["location"])).content == b"a ready build"
    assert (
        await sweeper.sweep(
            ctx.sessions, ctx.storage, clock.now(), ctx.settings.resolved_public_url
        )
    ).orphan_objects == 0

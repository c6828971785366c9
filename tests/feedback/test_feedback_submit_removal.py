"""Issue 38, "Feedback goes with its build": deleting a build (by hand, or by the application's
retention rule), an application or a project deletes its feedback and the screenshots' objects,
on the local disk and in an S3 bucket. A screenshot is written before its feedback's row
commits, and removed again when that does not happen; one a crash left is the sweeper's."""

from __future__ import annotations

import io
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import httpx
import pytest
from fastapi import FastAPI

from buildbay.app import create_app
from buildbay.builds import sweeper
from buildbay.builds.sweeper import GRACE, sweep
from buildbay.clock import FrozenClock
from buildbay.config import Settings
from buildbay.storage.s3 import S3Storage
from tests.conftest import BASE_URL, S3_REGION, Account, Api, S3Server, assert_problem
from tests.feedback.submitting import World, make_world, opened, png, screenshots, upload

pytestmark = pytest.mark.usefixtures("no_leaks")


@pytest.fixture(params=["local", "s3"])
async def app(
    request: pytest.FixtureRequest, settings: Settings, clock: FrozenClock
) -> AsyncIterator[FastAPI]:
    """Both backends: screenshots in local files or in a bucket."""
    storage = None
    if request.param == "s3":
        s3: S3Server = request.getfixturevalue("s3_server")
        storage = S3Storage(
            s3.new_bucket(), endpoint_url=s3.endpoint_url, region=S3_REGION, clock=clock.now
        )
    application = create_app(settings, clock=clock, storage=storage, migrate_on_start=False)
    yield application
    await application.state.ctx.dispose()


@pytest.fixture
async def world(api: Api, client: httpx.AsyncClient, app: FastAPI, owner: Account) -> World:
    return await make_world(api, client, app, owner)


async def stored_screenshots(world: World) -> set[str]:
    """The keys of every screenshot object in the storage."""
    found: set[str] = set()
    async for keys in world.ctx.storage.stored_keys(datetime(2100, 1, 1, tzinfo=UTC)):
        found.update(k for k in keys if k.startswith("feedback/"))
    return found


async def send_with_screenshots(world: World, build: dict[str, object] | None = None) -> set[str]:
    """Feedback with two screenshots on the build; their storage keys."""
    r = await world.send(world.tester, files=screenshots(png(), png((5, 5))), build=build)
    assert r.status_code == 201, r.text
    feedback = r.json()
    prefix = f"feedback/{world.project['id']}/{feedback['id']}"
    return {f"{prefix}/{s['id']}.png" for s in feedback["screenshots"]}


async def view(world: World, url: str) -> httpx.Response:
    """A screenshot's address, followed as a browser follows it (to the bucket, on S3)."""
    r = await world.client.get(url.removeprefix(BASE_URL))
    if r.status_code != 302:
        return r
    async with httpx.AsyncClient(timeout=30) as outside:
        return await outside.get(r.headers["location"])


async def test_a_screenshot_is_served_inline_as_the_image_it_is(world: World) -> None:
    r = await world.send(world.tester, files=screenshots(png((7, 3))))
    [shot] = r.json()["screenshots"]

    served = await view(world, shot["url"])

    assert served.status_code == 200, served.text
    assert served.headers["content-type"] == "image/png"
    assert served.headers["content-disposition"].startswith("inline")
    assert opened(served.content).size == (7, 3)


async def test_retention_deletes_a_build_with_its_feedback_and_screenshots(
    world: World, clock: FrozenClock
) -> None:
    doomed = await send_with_screenshots(world)
    r = await world.send(world.tester, files=screenshots(png()))
    doomed_url = r.json()["screenshots"][0]["url"]
    newer = await world.upload()
    kept = await send_with_screenshots(world, newer)
    assert await stored_screenshots(world) >= doomed | kept
    r = await world.client.put(
        f"/api/projects/{world.project['id']}/applications/{world.application['id']}",
        json={"retention": {"keepLast": 1, "protect": {"groups": False, "channels": False}}},
        headers=world.owner.headers,
    )
    assert r.status_code == 200, r.text

    ctx = world.ctx
    swept = await sweep(ctx.sessions, ctx.storage, clock.now(), ctx.settings.resolved_public_url)

    assert swept.retention == 1
    left = await stored_screenshots(world)
    assert not doomed & left  # the old build's screenshots: gone from the storage
    assert kept <= left  # the newer build's: kept
    assert_problem(await world.client.get(doomed_url.removeprefix(BASE_URL)), 404)
    # And the orphan sweep a while later leaves the kept ones alone.
    clock.advance(seconds=GRACE.total_seconds() + 60)
    swept = await sweep(ctx.sessions, ctx.storage, clock.now(), ctx.settings.resolved_public_url)
    assert swept.orphan_objects == 0
    assert kept <= await stored_screenshots(world)


async def test_deleting_a_build_by_hand_deletes_its_screenshots(world: World) -> None:
    doomed = await send_with_screenshots(world)
    other = await world.upload()
    kept = await send_with_screenshots(world, other)

    r = await world.client.delete(
        f"{world.builds}/{world.build['buildId']}", headers=world.developer.headers
    )

    assert r.status_code == 204, r.text
    assert await stored_screenshots(world) == kept
    assert doomed


async def test_deleting_an_application_deletes_its_feedback_s_screenshots(
    world: World, api: Api
) -> None:
    doomed = await send_with_screenshots(world)
    other_app = await api.application(world.owner, world.project["id"], "Other")
    other_build = await upload(world.client, world.owner, world.project["id"], other_app["id"])
    r = await world.client.post(
        f"/api/app-distribution/{world.project['id']}/{other_app['id']}/builds/"
        f"{other_build['buildId']}/feedback",
        files=[("text", (None, b"x")), ("category", (None, b"bug")), *screenshots(png())],
        headers=world.tester.headers,
    )
    assert r.status_code == 201, r.text

    r = await world.client.delete(
        f"/api/projects/{world.project['id']}/applications/{world.application['id']}",
        headers=world.owner.headers,
    )

    assert r.status_code == 204, r.text
    left = await stored_screenshots(world)
    assert not doomed & left
    assert len(left) == 1  # the other application's


async def test_deleting_a_project_deletes_its_feedback_s_screenshots(
    world: World, api: Api
) -> None:
    await send_with_screenshots(world)
    elsewhere = await api.project(world.owner, "Elsewhere")
    await api.add_member(world.owner, elsewhere["id"], world.tester, "tester")
    app = await api.application(world.owner, elsewhere["id"])
    build = await upload(world.client, world.owner, elsewhere["id"], app["id"])
    r = await world.client.post(
        f"/api/app-distribution/{elsewhere['id']}/{app['id']}/builds/{build['buildId']}/feedback",
        files=[("text", (None, b"x")), ("category", (None, b"bug")), *screenshots(png())],
        headers=world.tester.headers,
    )
    assert r.status_code == 201, r.text

    r = await world.client.delete(
        f"/api/projects/{world.project['id']}", headers=world.owner.headers
    )

    assert r.status_code == 204, r.text
    left = await stored_screenshots(world)
    assert [k.split("/")[1] for k in left] == [elsewhere["id"]]


async def test_a_screenshot_no_feedback_names_is_swept_once_an_hour_old(
    world: World, clock: FrozenClock
) -> None:
    kept = await send_with_screenshots(world)
    # What a crash between the objects' writes and the row's commit leaves.
    left_by_a_crash = f"feedback/{world.project['id']}/fbk_01M8ZZZZZZZZZZZZZZZZZZZZZZ/x.png"
    data = png()
    await world.ctx.storage.put(left_by_a_crash, io.BytesIO(data), len(data), "image/png")
    ctx = world.ctx

    assert await sweeper.sweep_orphan_objects(ctx.sessions, ctx.storage, clock.now()) == 0
    clock.advance(seconds=GRACE.total_seconds() + 60)
    assert await sweeper.sweep_orphan_objects(ctx.sessions, ctx.storage, clock.now()) == 1

    assert await stored_screenshots(world) == kept


async def test_screenshots_written_for_a_feedback_that_does_not_commit_are_removed(
    world: World,
) -> None:
    """The build is deleted while the feedback's body is still arriving: its screenshots are
    written, then its rows cannot be (the build is gone), and the objects go again."""
    deleted: list[int] = []

    async def body() -> AsyncIterator[bytes]:
        yield b'--b\r\nContent-Disposition: form-data; name="text"\r\n\r\nhi\r\n'
        yield b'--b\r\nContent-Disposition: form-data; name="category"\r\n\r\nbug\r\n'
        yield (
            b'--b\r\nContent-Disposition: form-data; name="screenshots"; filename="a.png"\r\n'
            b"Content-Type: image/png\r\n\r\n" + png() + b"\r\n"
        )
        r = await world.client.delete(
            f"{world.builds}/{world.build['buildId']}", headers=world.owner.headers
        )
        deleted.append(r.status_code)
        yield b"--b--\r\n"

    r = await world.client.post(
        world.feedback_url(),
        content=body(),
        headers={**world.tester.headers, "Content-Type": "multipart/form-data; boundary=b"},
    )

    assert deleted == [204]
    assert_problem(r, 404, "build_not_found")
    assert await stored_screenshots(world) == set()

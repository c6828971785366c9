"""Issue 38, "What a tester does": a tester sends feedback on a build they can see, with
screenshots that are stored re-encoded (no metadata survives: read back with Pillow) and served
through short-lived signed addresses."""

from __future__ import annotations

import io
import os
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from PIL import Image

from buildbay.clock import FrozenClock
from buildbay.feedback.links import SCREENSHOT_URL_SECONDS, URL_SLOT_SECONDS
from buildbay.feedback.submission import WRITE_BYTES
from tests.conftest import BASE_URL, Account, Api, assert_problem, iso_z
from tests.feedback.submitting import (
    GPS_IFD,
    World,
    form_parts,
    heic_with_gps,
    jpeg_with_gps,
    make_world,
    opened,
    png,
    png_with_text,
    screenshots,
)

pytestmark = pytest.mark.usefixtures("no_leaks")


@pytest.fixture
async def world(api: Api, client: httpx.AsyncClient, app: FastAPI, owner: Account) -> World:
    return await make_world(api, client, app, owner)


async def fetch(world: World, url: str) -> httpx.Response:
    """A screenshot's address, opened as a browser would (no token)."""
    assert url.startswith(f"{BASE_URL}/feedback-screenshots/"), url
    return await world.client.get(url.removeprefix(BASE_URL))


async def test_a_tester_sends_feedback_and_no_metadata_survives_in_the_stored_screenshots(
    world: World, clock: FrozenClock
) -> None:
    # A photo taken sideways (EXIF orientation 6: turn 90° clockwise to show it), with GPS.
    photo = jpeg_with_gps((64, 32), orientation=6)
    assert opened(photo).getexif().get_ifd(GPS_IFD)  # the test's file does carry a position
    files = [
        *screenshots(photo, name="IMG_0001.jpg", kind="image/jpeg"),
        *screenshots(png_with_text((40, 30))),
        *screenshots(heic_with_gps((64, 48)), name="IMG_0002.HEIC", kind="image/heic"),
    ]
    context = '{"model": "iPhone 15", "os": "17.4", "locale": "de_DE", "free": {"a": [1, 2]}}'

    r = await world.send(
        world.tester,
        {"text": "  The checkout button\ndoes nothing\n", "category": "bug", "context": context},
        files,
    )

    assert r.status_code == 201, r.text
    body = r.json()
    assert body["id"].startswith("fbk_")
    assert body["buildId"] == world.build["buildId"]
    assert body["tester"] == {"id": world.tester.user["id"], "email": world.tester.email}
    assert body["reporterEmail"] == world.tester.email
    assert (body["category"], body["status"]) == ("bug", "new")
    assert body["text"] == "The checkout button\ndoes nothing"  # trimmed around, kept inside
    assert body["context"] == {
        "model": "iPhone 15", "os": "17.4", "locale": "de_DE", "free": {"a": [1, 2]}
    }  # fmt: skip
    assert body["createdAt"] == body["updatedAt"] == iso_z(clock.now())
    shots = body["screenshots"]
    assert [(s["width"], s["height"]) for s in shots] == [(32, 64), (40, 30), (64, 48)]
    assert all(s["id"].startswith("fbs_") for s in shots)

    kinds = []
    for shot in shots:
        served = await fetch(world, shot["url"])
        assert served.status_code == 200, served.text
        assert served.headers["content-disposition"].startswith("inline")
        assert int(served.headers["content-length"]) == shot["bytes"] == len(served.content)
        stored = opened(served.content)
        kinds.append((served.headers["content-type"], stored.format))
        # Nothing but pixels: no EXIF (GPS, device), no text, no comment, no ICC profile.
        assert dict(stored.getexif()) == {}
        assert not stored.getexif().get_ifd(GPS_IFD)
        assert set(stored.info) <= {"jfif", "jfif_version", "jfif_unit", "jfif_density", "dpi"}
        assert getattr(stored, "text", {}) == {}
    # PNG stays PNG; JPEG stays JPEG; HEIC becomes JPEG.
    assert kinds == [("image/jpeg", "JPEG"), ("image/png", "PNG"), ("image/jpeg", "JPEG")]
    # The photo was turned upright before its EXIF went: the blue half (its left, as taken)
    # is now on top.
    upright = opened((await fetch(world, shots[0]["url"])).content).convert("RGB")
    top, bottom = upright.getpixel((16, 4)), upright.getpixel((16, 60))
    assert isinstance(top, tuple)
    assert isinstance(bottom, tuple)
    assert top[2] > 150 > top[0]
    assert bottom[0] > 150 > bottom[2]


async def test_screenshots_sent_in_small_chunks_are_stored_whole_and_in_order(
    world: World,
) -> None:
    """Two screenshots larger than what is gathered before a write, arriving 64 KiB at a
    time as from a network: each is stored with every one of its pixels (PNG is lossless), in
    the order sent, whatever chunks their bytes were written in."""
    side = 700  # random pixels do not compress: ~1.4 MiB a PNG
    sent = [Image.frombytes("RGB", (side, side), os.urandom(side * side * 3)) for _ in range(2)]
    files = []
    for image in sent:
        out = io.BytesIO()
        image.save(out, "PNG")
        assert out.tell() > WRITE_BYTES
        files.append(("screenshots", ("shot.png", out.getvalue(), "image/png")))
    request = httpx.Request("POST", BASE_URL, files=form_parts(None, files))
    body = request.read()

    async def chunks() -> AsyncIterator[bytes]:
        for start in range(0, len(body), 64 * 1024):
            yield body[start : start + 64 * 1024]

    headers = {**world.tester.headers, "Content-Type": request.headers["content-type"]}
    r = await world.client.post(world.feedback_url(), content=chunks(), headers=headers)

    assert r.status_code == 201, r.text
    shots = r.json()["screenshots"]
    assert len(shots) == len(sent)
    for shot, image in zip(shots, sent, strict=True):
        stored = opened((await fetch(world, shot["url"])).content)
        assert stored.format == "PNG"
        assert stored.tobytes() == image.tobytes()


async def test_the_stored_objects_are_under_the_feedback_s_own_keys(world: World) -> None:
    r = await world.send(world.tester, files=screenshots(png(), png((9, 9))))
    assert r.status_code == 201, r.text
    feedback = r.json()
    storage = world.ctx.storage
    prefix = f"feedback/{world.project['id']}/{feedback['id']}"
    for shot in feedback["screenshots"]:
        info = await storage.stat(f"{prefix}/{shot['id']}.png")
        assert info is not None
        assert info.size == shot["bytes"]


async def test_feedback_without_screenshots_or_context_is_taken(world: World) -> None:
    r = await world.send(world.developer, {"category": "suggestion", "text": "Dark mode?"})
    assert r.status_code == 201, r.text
    body = r.json()
    assert (body["screenshots"], body["context"], body["category"]) == ([], None, "suggestion")
    assert body["tester"]["id"] == world.developer.user["id"]  # a developer may send it too


async def test_a_screenshot_address_is_short_lived_and_signed(
    world: World, clock: FrozenClock
) -> None:
    r = await world.send(world.tester, files=screenshots(png()))
    [shot] = r.json()["screenshots"]
    url = shot["url"]
    token = url.rsplit("/", 1)[1]
    _, expires, _ = token.split(".")
    lives = int(expires) - clock.now().timestamp()
    assert SCREENSHOT_URL_SECONDS <= lives <= SCREENSHOT_URL_SECONDS + URL_SLOT_SECONDS
    # The same feedback answered twice within a slot gives the same address (browsers cache).
    again = await world.send(world.tester, files=screenshots(png()))
    assert again.json()["screenshots"][0]["url"].rsplit(".", 2)[1] == expires

    # Altered: refused; another screenshot's id with this signature: refused.
    forged = url[:-3] + ("AAA" if not url.endswith("AAA") else "BBB")
    assert_problem(await fetch(world, forged), 403, "invalid_signature")
    other = again.json()["screenshots"][0]["id"]
    assert_problem(await fetch(world, url.replace(shot["id"], other)), 403, "invalid_signature")
    assert_problem(
        await world.client.get("/feedback-screenshots/not-a-token"), 403, "invalid_signature"
    )

    clock.advance(seconds=lives + 1)
    assert_problem(await fetch(world, url), 403, "url_expired")


async def test_a_tester_the_build_was_not_distributed_to_is_refused(world: World, api: Api) -> None:
    # A build distributed to nobody: an application that gives its builds to no group.
    hidden_app = await api.application(
        world.owner, world.project["id"], "Internal", autoDistributeGroups=[]
    )
    hidden = await api.upload(world.owner, world.project["id"], hidden_app["id"])
    url = (
        f"/api/app-distribution/{world.project['id']}/{hidden_app['id']}/builds/"
        f"{hidden['buildId']}/feedback"
    )
    r = await world.client.post(url, files=form_parts(), headers=world.tester.headers)

    assert_problem(r, 403, "not_distributed")
    # A developer sees every build, and may send feedback on it.
    r = await world.client.post(url, files=form_parts(), headers=world.developer.headers)
    assert r.status_code == 201, r.text


async def test_who_is_not_a_member_or_not_signed_in_is_refused(world: World) -> None:
    assert_problem(await world.send(world.stranger), 403, "not_a_member")
    r = await world.send(None)
    assert_problem(r, 401, "not_authenticated")
    assert r.headers["www-authenticate"] == "Bearer"
    assert_problem(await world.send({"Authorization": "Basic dXNlcjpwYXNz"}), 401)
    assert_problem(await world.send({"Authorization": "Bearer not-a-token"}), 401)


async def test_unknown_ids_are_404(world: World) -> None:
    r = await world.send(world.tester, build={"buildId": "bld_00000000000000000000000000"})
    assert_problem(r, 404, "build_not_found")
    url = world.feedback_url().replace(world.application["id"], "app_00000000000000000000000000")
    r = await world.client.post(url, files=form_parts(), headers=world.tester.headers)
    assert_problem(r, 404, "application_not_found")


async def test_an_api_token_must_be_one_without_a_scope(world: World) -> None:
    async def token(scope: str | None) -> dict[str, str]:
        r = await world.client.post(
            "/api/account/api-tokens",
            json={"name": f"t {scope}", "scope": scope},
            headers=world.tester.headers,
        )
        assert r.status_code == 201, r.text
        return {"Authorization": f"Bearer {r.json()['token']}"}

    assert_problem(await world.send(await token("read")), 403, "insufficient_scope")
    assert (await world.send(await token(None))).status_code == 201


async def test_feedback_on_a_build_that_is_not_ready_is_refused(world: World) -> None:
    r = await world.client.post(
        f"{world.builds}/upload-link",
        json={"fileName": "next.apk", "fileSize": 10},
        headers=world.owner.headers,
    )
    pending: dict[str, Any] = r.json()
    r = await world.send(world.developer, build=pending)
    assert_problem(r, 409, "build_not_ready")


async def test_a_feedback_s_screenshot_is_gone_with_its_build(world: World) -> None:
    r = await world.send(world.tester, files=screenshots(png()))
    [shot] = r.json()["screenshots"]
    key = f"feedback/{world.project['id']}/{r.json()['id']}/{shot['id']}.png"
    r = await world.client.delete(
        f"{world.builds}/{world.build['buildId']}", headers=world.owner.headers
    )
    assert r.status_code == 204, r.text

    assert_problem(await fetch(world, shot["url"]), 404, "screenshot_not_found")
    assert await world.ctx.storage.stat(key) is None


async def test_the_application_api_reads_and_changes_feedback_mode(world: World) -> None:
    app_url = f"/api/projects/{world.project['id']}/applications/{world.application['id']}"
    shown = (await world.client.get(app_url, headers=world.tester.headers)).json()
    assert shown["feedbackMode"] == "testers-only"

    r = await world.client.put(
        app_url, json={"feedbackMode": "anyone-with-update-key"}, headers=world.owner.headers
    )
    assert r.status_code == 200, r.text
    assert r.json()["feedbackMode"] == "anyone-with-update-key"
    for wrong in ("anyone", None, 1):
        r = await world.client.put(
            app_url, json={"feedbackMode": wrong}, headers=world.owner.headers
        )
        problem = assert_problem(r, 422)
        assert problem["errors"][0]["field"] == "feedbackMode"
    # A developer may not change it (applications are the admins').
    r = await world.client.put(
        app_url, json={"feedbackMode": "testers-only"}, headers=world.developer.headers
    )
    assert_problem(r, 403, "insufficient_role")
    created = await world.api.application(
        world.owner, world.project["id"], "Beta ring", feedbackMode="anyone-with-update-key"
    )
    assert created["feedbackMode"] == "anyone-with-update-key"


async def test_screenshot_addresses_in_answers_last_the_slot(world: World) -> None:
    """(An address answered at the very end of a slot still lives the whole TTL.)"""
    clock: FrozenClock = world.ctx.clock  # type: ignore[assignment]
    now = clock.now().timestamp()
    clock.advance(seconds=URL_SLOT_SECONDS - now % URL_SLOT_SECONDS - 1)
    r = await world.send(world.tester, files=screenshots(png()))
    expires = int(r.json()["screenshots"][0]["url"].rsplit(".", 2)[1])
    assert expires - clock.now().timestamp() >= SCREENSHOT_URL_SECONDS
    assert expires % URL_SLOT_SECONDS == 0
    assert timedelta(seconds=expires - clock.now().timestamp()) < timedelta(minutes=21)

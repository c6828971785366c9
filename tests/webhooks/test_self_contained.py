"""Issue 36, "Updates and downloads say the truth": every download of a build, whichever way it
goes (the API, the console, a shared or a personal install link, an iOS manifest), is recorded
and told as `build.downloaded` by one service call; and every event tells of its object on its
own (project and application names, the version, the uploader, the console page to open, the
install page where there is one). Verified as a receiver does, with `standardwebhooks`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from tests.builds.android_files import APK
from tests.builds.test_metadata import ipa
from tests.conftest import BASE_URL, Account, Api
from tests.console.test_mail_pages import post, sign_in
from tests.webhooks.conftest import Hooks
from tests.webhooks.receiver import Receiver

pytestmark = pytest.mark.usefixtures("no_leaks")

PUBLIC = "http://testserver"


@pytest.fixture
async def browser(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """A browser's cookies (the console's are Secure, hence https)."""
    transport = httpx.ASGITransport(app=app)
    base = BASE_URL.replace("http://", "https://")
    async with httpx.AsyncClient(transport=transport, base_url=base) as client:
        yield client


async def _events(hooks: Hooks, receiver: Receiver) -> list[dict[str, Any]]:
    await hooks.run()
    assert all(m.verified_by for m in receiver.received)  # standardwebhooks verified each
    payloads = [m.payload for m in receiver.received]
    receiver.received.clear()
    return payloads


async def _upload(
    api: Api, owner: Account, app: dict[str, Any], data: bytes, name: str
) -> dict[str, Any]:
    return await api.upload(owner, app["projectId"], app["id"], data, name)


def _path(url: str) -> str:
    assert url.startswith(PUBLIC), url
    return url.removeprefix(PUBLIC)


async def test_every_download_is_recorded_and_told_whichever_way_it_goes(
    hooks: Hooks, api: Api, owner: Account, receiver: Receiver, browser: httpx.AsyncClient
) -> None:
    project = await api.project(owner)
    app = await api.application(owner, project["id"])
    tess = await api.register("tess@example.com")
    await api.add_member(owner, project["id"], tess, "tester")
    build = await _upload(api, owner, app, APK.read_bytes(), "demo.apk")
    await hooks.create(owner, project["id"], receiver.url, ["build.downloaded"], receiver)
    api_path = f"/api/app-distribution/{project['id']}/{app['id']}/builds/{build['buildId']}"
    console_path = f"/projects/{project['id']}/apps/{app['id']}/builds/{build['buildId']}"
    tess_by = {"userId": tess.user["id"], "email": tess.email, "name": tess.user["name"]}

    # The API's download, by the owner.
    r = await hooks.client.get(f"{api_path}/download", headers=owner.headers)
    assert r.status_code == 302, r.text
    [by_api] = await _events(hooks, receiver)
    assert by_api["data"]["downloadedBy"]["userId"] == owner.user["id"]
    assert by_api["data"]["installLinkId"] is None

    # The console's, by a tester.
    await sign_in(browser, tess.email)
    r = await browser.get(f"{console_path}/download")
    assert r.status_code == 302, r.text
    [by_console] = await _events(hooks, receiver)
    assert (by_console["data"]["downloadedBy"], by_console["data"]["installLinkId"]) == (
        tess_by,
        None,
    )

    # A shared install link's: by whoever holds it, nobody known.
    r = await hooks.client.post(f"{api_path}/install-link", headers=owner.headers)
    assert r.status_code == 201, r.text
    shared = r.json()
    r = await hooks.client.get(f"{_path(shared['url'])}/download")
    assert r.status_code == 302, r.text
    [by_shared] = await _events(hooks, receiver)
    assert by_shared["type"] == "build.downloaded"
    assert by_shared["data"]["downloadedBy"] is None
    assert by_shared["data"]["installLinkId"] == shared["linkId"]
    assert by_shared["data"]["installUrl"] == shared["url"]  # the build's live shared link

    # The tester's own link (the console's Install): theirs.
    r = await post(browser, f"{console_path}/install", {}, page=console_path)
    assert r.status_code == 303, r.text
    own = r.headers["location"]
    assert own != shared["url"]
    r = await browser.get(f"{_path(own)}/download")
    assert r.status_code == 302, r.text
    [by_own] = await _events(hooks, receiver)
    assert by_own["data"]["downloadedBy"] == tess_by
    assert by_own["data"]["installLinkId"] not in {None, shared["linkId"]}

    # Each is counted, and is in the build's report of who installed it.
    shown = (await hooks.client.get(api_path, headers=owner.headers)).json()
    assert shown["downloadsCount"] == 4
    assert by_own["data"]["downloadsCount"] == 4


async def test_the_ios_manifest_is_the_device_s_download_and_is_told(
    hooks: Hooks, api: Api, owner: Account, receiver: Receiver
) -> None:
    project = await api.project(owner)
    app = await api.application(owner, project["id"])
    build = await _upload(api, owner, app, ipa().getvalue(), "Example.ipa")
    await hooks.create(owner, project["id"], receiver.url, ["build.downloaded"], receiver)
    api_path = f"/api/app-distribution/{project['id']}/{app['id']}/builds/{build['buildId']}"
    r = await hooks.client.post(f"{api_path}/install-link", headers=owner.headers)
    shared = r.json()

    r = await hooks.client.get(f"{_path(shared['url'])}/manifest.plist")
    assert r.status_code == 200, r.text

    [downloaded] = await _events(hooks, receiver)
    assert downloaded["type"] == "build.downloaded"
    assert downloaded["data"]["buildId"] == build["buildId"]
    assert downloaded["data"]["installLinkId"] == shared["linkId"]
    assert downloaded["data"]["downloadsCount"] == 1


async def test_every_event_tells_of_its_object_on_its_own(
    hooks: Hooks, api: Api, owner: Account, receiver: Receiver, browser: httpx.AsyncClient
) -> None:
    """Names, version, uploader and the console page (which opens), and the install page once
    the build has a shared one: a chat message needs nothing more."""
    project = await api.project(owner, "Moon <Base>")
    hook = await hooks.create(owner, project["id"], receiver.url,
                              ["build.ready", "build.distributed", "application.created",
                               "member.added", "build.deleted"], receiver)  # fmt: skip
    app = await api.application(owner, project["id"], "Rover & Co")
    build = await _upload(api, owner, app, APK.read_bytes(), "demo.apk")
    tess = await api.register("tess@example.com")
    await api.add_member(owner, project["id"], tess, "tester")
    by_type = {event["type"]: event for event in await _events(hooks, receiver)}
    assert sorted(by_type) == ["application.created", "build.ready", "member.added"]
    created, ready, added = (by_type[t] for t in sorted(by_type))

    data = ready["data"]
    assert data["projectName"] == "Moon <Base>"
    assert data["applicationName"] == "Rover & Co"
    assert data["version"] == "1.4.2 (42)"
    assert data["uploader"] == {
        "userId": owner.user["id"], "name": owner.user["name"], "email": owner.email,
    }  # fmt: skip
    assert data["installUrl"] is None  # no shared link yet: testers have their own
    await sign_in(browser, owner.email)
    page = await browser.get(_path(data["consoleUrl"]))
    assert page.status_code == 200
    assert "demo.apk" in page.text
    for event, heading in [(created, "Rover &amp; Co"), (added, "Moon &lt;Base&gt;")]:
        assert event["data"]["projectName"] == "Moon <Base>"
        page = await browser.get(_path(event["data"]["consoleUrl"]))
        assert page.status_code == 200
        assert heading in page.text

    api_path = f"/api/app-distribution/{project['id']}/{app['id']}/builds/{build['buildId']}"
    shared = (await hooks.client.post(f"{api_path}/install-link", headers=owner.headers)).json()
    r = await hooks.client.post(
        f"{api_path}/distribute", json={"emails": [tess.email]}, headers=owner.headers
    )
    assert r.status_code == 200, r.text
    [distributed] = await _events(hooks, receiver)
    assert distributed["data"]["installUrl"] == shared["url"]
    assert distributed["data"]["consoleUrl"] == data["consoleUrl"]
    page = await hooks.client.get(_path(shared["url"]), headers={"Accept": "text/html"})
    assert page.status_code == 200

    r = await hooks.client.delete(api_path, headers=owner.headers)
    assert r.status_code == 204
    [deleted] = await _events(hooks, receiver)
    # Its page and links went with it: the application's page is the one to open.
    assert deleted["data"]["installUrl"] is None
    assert deleted["data"]["consoleUrl"] == f"{PUBLIC}/projects/{project['id']}/apps/{app['id']}"
    assert deleted["data"]["applicationName"] == "Rover & Co"

    delivery_id = await hooks.test(owner, project["id"], hook["id"])
    [test] = await _events(hooks, receiver)
    assert test["data"]["projectName"] == "Moon <Base>"
    assert delivery_id
    page = await browser.get(_path(test["data"]["consoleUrl"]))
    assert page.status_code == 200
    assert receiver.url in page.text

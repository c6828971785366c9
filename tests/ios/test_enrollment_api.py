"""Issue 37, "API and console": a tester's own devices (`/api/account/devices`: list, rename,
delete; someone else's device is not there, 404) and a developer's wish for a mail per enrolled
device (`/api/projects/{id}/members/me/device-mail`)."""

from __future__ import annotations

import httpx
import pytest
from fastapi import FastAPI

from tests.conftest import Account, Api, assert_problem
from tests.ios.enrolling import UDID, enroll_device

pytestmark = pytest.mark.usefixtures("no_leaks")

OTHER_UDID = "B" * 40


async def test_a_tester_lists_renames_and_removes_their_devices(
    app: FastAPI, client: httpx.AsyncClient, api: Api
) -> None:
    ada = await api.register("ada@example.com")
    phone = await enroll_device(app, ada)
    ipad = await enroll_device(app, ada, UDID=OTHER_UDID, PRODUCT="iPad13,1",
                               DEVICE_NAME="Ada's iPad")  # fmt: skip

    r = await client.get("/api/account/devices", headers=ada.headers)
    assert r.status_code == 200, r.text
    assert r.json() == {"devices": [phone, ipad]}  # in the order they enrolled

    r = await client.patch(
        f"/api/account/devices/{phone['id']}", json={"name": "  Test iPhone 15  "},
        headers=ada.headers,
    )  # fmt: skip
    assert r.status_code == 200, r.text
    assert r.json() == {**phone, "name": "Test iPhone 15"}

    r = await client.delete(f"/api/account/devices/{ipad['id']}", headers=ada.headers)
    assert r.status_code == 204, r.text
    r = await client.get("/api/account/devices", headers=ada.headers)
    assert r.json() == {"devices": [{**phone, "name": "Test iPhone 15"}]}
    # Removed, it may enroll again: a new row.
    again = await enroll_device(app, ada, UDID=OTHER_UDID)
    assert again["id"] != ipad["id"]


async def test_someone_elses_device_is_not_found(
    app: FastAPI, client: httpx.AsyncClient, api: Api
) -> None:
    ada, bob = await api.register("ada@example.com"), await api.register("bob@example.com")
    phone = await enroll_device(app, ada)

    r = await client.get("/api/account/devices", headers=bob.headers)
    assert r.json() == {"devices": []}
    for r in (
        await client.patch(
            f"/api/account/devices/{phone['id']}", json={"name": "Mine"}, headers=bob.headers
        ),
        await client.delete(f"/api/account/devices/{phone['id']}", headers=bob.headers),
        await client.delete("/api/account/devices/dev_00000000000000000000000000",
                            headers=ada.headers),
    ):  # fmt: skip
        assert_problem(r, 404, "device_not_found")
    r = await client.get("/api/account/devices", headers=ada.headers)
    assert r.json() == {"devices": [phone]}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": ""}, "name"),
        ({"name": "   "}, "name"),
        ({"name": "x" * 51}, "name"),  # Apple's limit is 50
        ({"name": "line\nbreak"}, "name"),
        ({"name": "\u202eenohPi"}, "name"),
        ({"name": "=?utf-8?q?x?="}, "name"),
        ({"name": 5}, "name"),
        ({"name": "ok", "udid": UDID}, "udid"),  # nothing else may be set
        ({}, "name"),
    ],
)
async def test_a_name_apple_or_a_page_cannot_take_is_refused(
    app: FastAPI, client: httpx.AsyncClient, api: Api, body: dict[str, object], field: str
) -> None:
    ada = await api.register("ada@example.com")
    phone = await enroll_device(app, ada)

    r = await client.patch(f"/api/account/devices/{phone['id']}", json=body, headers=ada.headers)

    problem = assert_problem(r, 422, "validation_error")
    assert [e["field"] for e in problem["errors"]] == [field]
    r = await client.get("/api/account/devices", headers=ada.headers)
    assert r.json() == {"devices": [phone]}


async def test_a_fifty_character_name_is_taken(
    app: FastAPI, client: httpx.AsyncClient, api: Api
) -> None:
    ada = await api.register("ada@example.com")
    phone = await enroll_device(app, ada)

    r = await client.patch(
        f"/api/account/devices/{phone['id']}", json={"name": "é" * 50}, headers=ada.headers
    )

    assert r.status_code == 200, r.text
    assert r.json()["name"] == "é" * 50


async def test_a_developer_asks_for_device_mails_and_a_tester_cannot(
    client: httpx.AsyncClient, api: Api, owner: Account
) -> None:
    project = await api.project(owner)
    dev, tess = await api.register("dev@example.com"), await api.register("tess@example.com")
    await api.add_member(owner, project["id"], dev, "developer")
    await api.add_member(owner, project["id"], tess, "tester")
    path = f"/api/projects/{project['id']}/members/me/device-mail"

    r = await client.get(path, headers=dev.headers)
    assert (r.status_code, r.json()) == (200, {"deviceMail": False})
    r = await client.put(path, json={"deviceMail": True}, headers=dev.headers)
    assert (r.status_code, r.json()) == (200, {"deviceMail": True})
    r = await client.get(path, headers=dev.headers)
    assert r.json() == {"deviceMail": True}
    # The owner's own wish is apart from the developer's.
    r = await client.get(path, headers=owner.headers)
    assert r.json() == {"deviceMail": False}

    assert_problem(await client.put(path, json={"deviceMail": True}, headers=tess.headers), 403,
                   "insufficient_role")  # fmt: skip
    stranger = await api.register("stranger@example.com")
    assert_problem(await client.get(path, headers=stranger.headers), 403, "not_a_member")
    r = await client.put(path, json={"deviceMail": "yes"}, headers=dev.headers)
    assert_problem(r, 422, "validation_error")
    r = await client.put(path, json={"deviceMail": False}, headers=dev.headers)
    assert r.json() == {"deviceMail": False}

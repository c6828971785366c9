"""Release channels: listed, created, deleted; builds published to them at verify or later, and
marked mandatory."""

from __future__ import annotations

import os
from typing import Any

import httpx

from tests.conftest import Account, Api, assert_problem


async def _setup(api: Api, owner: Account) -> tuple[str, str, str]:
    project = await api.project(owner)
    app = await api.application(owner, project["id"])
    base = f"/api/projects/{project['id']}/applications/{app['id']}/channels"
    return project["id"], app["id"], base


async def _verify(
    api: Api, client: httpx.AsyncClient, owner: Account, pid: str, aid: str, **extra: Any
) -> httpx.Response:
    base = f"/api/app-distribution/{pid}/{aid}/builds"
    # Other bytes each time: the same bytes again are the same build (a duplicate).
    data = b"PK\x03\x04 a build " + os.urandom(8)
    r = await client.post(
        f"{base}/upload-link",
        json={"fileName": "app.zip", "fileSize": len(data)},
        headers=owner.headers,
    )
    link = r.json()
    await client.put(link["uploadUrl"], content=data, headers=link["uploadHeaders"])
    return await client.post(
        f"{base}/verify", json={"buildId": link["buildId"], **extra}, headers=owner.headers
    )


async def test_a_new_application_has_the_default_channel(
    api: Api, client: httpx.AsyncClient, owner: Account
) -> None:
    _, _, base = await _setup(api, owner)
    r = await client.get(base, headers=owner.headers)
    assert r.status_code == 200
    [channel] = r.json()["channels"]
    assert channel["name"] == "default"
    assert channel["buildsCount"] == 0
    assert channel["latestBuildId"] is None
    assert set(channel) == {"id", "name", "buildsCount", "latestBuildId", "createdAt"}


async def test_verify_publishes_to_default_or_to_the_channels_named(
    api: Api, client: httpx.AsyncClient, owner: Account
) -> None:
    pid, aid, base = await _setup(api, owner)
    r = await client.post(base, json={"name": "beta"}, headers=owner.headers)
    assert r.status_code == 201, r.text
    beta = r.json()
    assert beta["name"] == "beta"
    assert beta["buildsCount"] == 0

    first = (await _verify(api, client, owner, pid, aid)).json()
    assert first["channels"] == ["default"]
    assert first["mandatory"] is False
    r = await _verify(api, client, owner, pid, aid, channels=["beta"], mandatory=True)
    assert r.status_code == 200, r.text
    second = r.json()
    assert second["channels"] == ["beta"]
    assert second["mandatory"] is True

    channels = {
        c["name"]: c for c in (await client.get(base, headers=owner.headers)).json()["channels"]
    }
    assert channels["default"]["latestBuildId"] == first["buildId"]
    assert channels["beta"]["latestBuildId"] == second["buildId"]
    assert channels["beta"]["buildsCount"] == 1

    # Later: both channels, and not mandatory any more.
    builds = f"/api/app-distribution/{pid}/{aid}/builds"
    r = await client.put(
        f"{builds}/{first['buildId']}/channels",
        json={"channels": ["beta", "default"]},
        headers=owner.headers,
    )
    assert r.status_code == 200, r.text
    assert r.json()["channels"] == ["beta", "default"]
    r = await client.put(
        f"{builds}/{second['buildId']}", json={"mandatory": False}, headers=owner.headers
    )
    assert r.status_code == 200
    assert r.json()["mandatory"] is False
    r = await client.get(f"{builds}/{second['buildId']}", headers=owner.headers)
    assert r.json()["mandatory"] is False
    assert r.json()["channels"] == ["beta"]
    channels = {
        c["name"]: c for c in (await client.get(base, headers=owner.headers)).json()["channels"]
    }
    assert channels["beta"]["buildsCount"] == 2


async def test_unknown_channels_and_bad_names_are_refused(
    api: Api, client: httpx.AsyncClient, owner: Account
) -> None:
    pid, aid, base = await _setup(api, owner)
    r = await _verify(api, client, owner, pid, aid, channels=["nightly"])
    assert_problem(r, 422, "unknown_channel")
    for name in ["", "Beta", "a" * 41, "be ta", "bêta"]:
        r = await client.post(base, json={"name": name}, headers=owner.headers)
        assert r.status_code == 422, name
    assert (
        await client.post(base, json={"name": "a" * 40}, headers=owner.headers)
    ).status_code == 201
    r = await client.post(base, json={"name": "default"}, headers=owner.headers)
    assert_problem(r, 409, "channel_exists")
    r = await client.put(
        f"/api/app-distribution/{pid}/{aid}/builds/bld_00000000000000000000000000/channels",
        json={"channels": ["default"]},
        headers=owner.headers,
    )
    assert_problem(r, 404, "build_not_found")


async def test_deleting_a_channel_keeps_its_builds_but_not_default(
    api: Api, client: httpx.AsyncClient, owner: Account
) -> None:
    pid, aid, base = await _setup(api, owner)
    beta = (await client.post(base, json={"name": "beta"}, headers=owner.headers)).json()
    build = (await _verify(api, client, owner, pid, aid, channels=["beta"])).json()
    assert (await client.delete(f"{base}/{beta['id']}", headers=owner.headers)).status_code == 204
    r = await client.get(
        f"/api/app-distribution/{pid}/{aid}/builds/{build['buildId']}", headers=owner.headers
    )
    assert r.status_code == 200
    assert r.json()["channels"] == []
    assert_problem(
        await client.delete(f"{base}/{beta['id']}", headers=owner.headers), 404, "channel_not_found"
    )
    default = (await client.get(base, headers=owner.headers)).json()["channels"][0]
    assert_problem(
        await client.delete(f"{base}/{default['id']}", headers=owner.headers),
        409,
        "default_channel",
    )

from __future__ import annotations

import hashlib

import httpx

from tests.conftest import Account, Api, assert_problem


async def test_three_step_upload_makes_a_ready_build(
    api: Api, client: httpx.AsyncClient, owner: Account
) -> None:
    project = await api.project(owner)
    app = await api.application(owner, project["id"])
    data = b"PK\x03\x04" + b"x" * 100_000

    build = await api.upload(owner, project["id"], app["id"], data, notes="First cut")

    assert build["status"] == "ready"
    assert build["sha256"] == hashlib.sha256(data).hexdigest()
    assert build["fileSize"] == len(data)
    assert build["notes"] == "First cut"
    assert build["uploadedBy"] == owner.user["id"]
    r = await client.get(build["downloadUrl"], headers=owner.headers)
    assert r.status_code == 302
    r = await client.get(r.headers["location"])
    assert r.status_code == 200
    assert r.content == data
    assert 'filename="app-release.apk"' in r.headers["content-disposition"]


async def test_verify_rejects_an_upload_that_never_arrived(
    api: Api, client: httpx.AsyncClient, owner: Account
) -> None:
    project = await api.project(owner)
    app = await api.application(owner, project["id"])
    base = f"/api/app-distribution/{project['id']}/{app['id']}/builds"
    r = await client.post(
        f"{base}/upload-link", json={"fileName": "a.apk", "fileSize": 10}, headers=owner.headers
    )
    build_id = r.json()["buildId"]
    r = await client.post(f"{base}/verify", json={"buildId": build_id}, headers=owner.headers)
    assert_problem(r, 422, "upload_incomplete")

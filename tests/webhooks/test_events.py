"""The events the services emit: each arrives (signed) with `data` the same JSON the API gives
for the object, plus `projectId` and what tells of it on its own (tests/webhooks/
test_self_contained.py), in the unit of work of the change."""

from __future__ import annotations

from typing import Any

import pytest

from buildbay.builds.sweeper import sweep
from buildbay.webhooks.events import SUBSCRIBABLE
from tests.conftest import Account, Api, statements_run
from tests.pools import Checkouts
from tests.webhooks.conftest import Hooks
from tests.webhooks.receiver import Receiver

pytestmark = pytest.mark.usefixtures("no_leaks")

ALL = [e.value for e in SUBSCRIBABLE]


def told(owner: Account, app: dict[str, Any], build: dict[str, Any], page: str) -> dict[str, Any]:
    """What a build event adds to the build, for a build of `app` uploaded by `owner`."""
    return {
        "projectId": app["projectId"],
        "projectName": "Acme",
        "applicationName": app["name"],
        "version": "1.4.2 (42)" if build["metadata"] else None,
        "uploader": {"userId": owner.user["id"], "name": owner.user["name"],
                     "email": owner.email},
        "consoleUrl": f"http://testserver/projects/{app['projectId']}/apps/{app['id']}{page}",
    }  # fmt: skip


def console(project: dict[str, Any], page: str = "") -> dict[str, Any]:
    return {
        "projectId": project["id"],
        "projectName": project["name"],
        "consoleUrl": f"http://testserver/projects/{project['id']}{page}",
    }


async def _events(hooks: Hooks, receiver: Receiver) -> list[dict[str, Any]]:
    await hooks.run()
    assert all(m.verified_by for m in receiver.received)
    payloads = [m.payload for m in receiver.received]
    receiver.received.clear()
    return payloads


async def test_build_events_carry_the_build_as_the_api_shows_it(
    hooks: Hooks, api: Api, owner: Account, receiver: Receiver
) -> None:
    project = await api.project(owner)
    app = await api.application(owner, project["id"])
    await hooks.create(owner, project["id"], receiver.url, ALL, receiver=receiver)
    await _events(hooks, receiver)  # nothing before

    build = await api.upload(owner, project["id"], app["id"])
    [ready] = await _events(hooks, receiver)
    assert ready["type"] == "build.ready"
    page = f"/builds/{build['buildId']}"
    assert ready["data"] == {**build, **told(owner, app, build, page)}

    base = f"/api/app-distribution/{project['id']}/{app['id']}/builds/{build['buildId']}"
    tester = await api.register("tester@example.com")
    await api.add_member(owner, project["id"], tester, "tester")
    await _events(hooks, receiver)
    r = await hooks.client.get(f"{base}/download", headers=tester.headers)
    assert r.status_code == 302, r.text
    [downloaded] = await _events(hooks, receiver)
    assert downloaded["type"] == "build.downloaded"
    shown = (await hooks.client.get(base, headers=owner.headers)).json()
    assert downloaded["data"] == {
        **shown,
        **told(owner, app, build, page),
        "downloadedBy": {
            "userId": tester.user["id"],
            "email": "tester@example.com",
            "name": tester.user["name"],
        },
        "installLinkId": None,
    }

    r = await hooks.client.delete(base, headers=owner.headers)
    assert r.status_code == 204, r.text
    [deleted] = await _events(hooks, receiver)
    assert deleted["type"] == "build.deleted"
    # Its page is gone: the application's is the one to open.
    assert deleted["data"] == {**shown, **told(owner, app, build, ""), "reason": "member"}


async def test_what_retention_deletes_is_told_as_build_deleted_with_its_reason(
    hooks: Hooks, api: Api, owner: Account, receiver: Receiver
) -> None:
    project = await api.project(owner)
    app = await api.application(owner, project["id"])
    base = f"/api/app-distribution/{project['id']}/{app['id']}/builds"
    made = [await api.upload(owner, project["id"], app["id"], f"b{i}".encode()) for i in range(3)]
    shown = [(await hooks.client.get(f"{base}/{b['buildId']}", headers=owner.headers)).json()
             for b in made[:2]]  # fmt: skip
    r = await hooks.client.put(
        f"/api/projects/{project['id']}/applications/{app['id']}",
        json={"retention": {"keepLast": 1}},
        headers=owner.headers,
    )
    assert r.status_code == 200, r.text
    await hooks.create(owner, project["id"], receiver.url, ["build.deleted"], receiver=receiver)
    ctx = hooks.ctx

    swept = await sweep(
        ctx.sessions, ctx.storage, ctx.clock.now(), ctx.settings.resolved_public_url
    )

    assert swept.retention == 2
    deleted = await _events(hooks, receiver)
    assert sorted((e["type"], e["data"]["buildId"]) for e in deleted) == sorted(
        ("build.deleted", b["buildId"]) for b in shown
    )
    by_id = {e["data"]["buildId"]: e["data"] for e in deleted}
    for build in shown:
        assert by_id[build["buildId"]] == {
            **build,
            **told(owner, app, build, ""),
            "reason": "retention",
        }


async def test_a_download_no_webhook_listens_for_sends_nothing(
    hooks: Hooks, api: Api, owner: Account, receiver: Receiver
) -> None:
    project = await api.project(owner)
    app = await api.application(owner, project["id"])
    await hooks.create(owner, project["id"], receiver.url, ["build.ready"], receiver=receiver)
    build = await api.upload(owner, project["id"], app["id"])
    base = f"/api/app-distribution/{project['id']}/{app['id']}/builds/{build['buildId']}"
    r = await hooks.client.get(f"{base}/download", headers=owner.headers)
    assert r.status_code == 302
    assert [p["type"] for p in await _events(hooks, receiver)] == ["build.ready"]


async def test_a_download_is_one_unit_of_work_on_one_connection(
    hooks: Hooks, api: Api, owner: Account, receiver: Receiver
) -> None:
    """The install and its event are written by one service call, in the unit of work that
    also read the build: the request never holds a read connection beside it (two pooled
    connections at once)."""
    project = await api.project(owner)
    app = await api.application(owner, project["id"])
    await hooks.create(owner, project["id"], receiver.url, ["build.downloaded"], receiver=receiver)
    build = await api.upload(owner, project["id"], app["id"])
    base = f"/api/app-distribution/{project['id']}/{app['id']}/builds/{build['buildId']}"
    ctx = hooks.ctx
    with Checkouts(ctx.engine, ctx.read_engine) as checkouts:
        r = await hooks.client.get(f"{base}/download", headers=owner.headers)
    assert r.status_code == 302, r.text
    assert (checkouts.most, checkouts.held) == (1, {})
    shown = (await hooks.client.get(base, headers=owner.headers)).json()
    assert shown["downloadsCount"] == 1
    [downloaded] = await _events(hooks, receiver)
    assert downloaded["type"] == "build.downloaded"
    assert downloaded["data"]["downloadsCount"] == 1
    assert downloaded["data"]["downloadedBy"]["userId"] == owner.user["id"]


async def test_application_events_carry_the_application_without_its_update_key(
    hooks: Hooks, api: Api, owner: Account, receiver: Receiver
) -> None:
    project = await api.project(owner)
    await hooks.create(owner, project["id"], receiver.url, ALL, receiver=receiver)
    app = await api.application(owner, project["id"])
    assert app["updateKey"]
    [created] = await _events(hooks, receiver)
    assert created["type"] == "application.created"
    page = f"/apps/{app['id']}"
    assert created["data"] == {**app, "updateKey": None, **console(project, page)}

    r = await hooks.client.delete(
        f"/api/projects/{project['id']}/applications/{app['id']}", headers=owner.headers
    )
    assert r.status_code == 204
    [deleted] = await _events(hooks, receiver)
    assert deleted["type"] == "application.deleted"
    assert deleted["data"] == {**app, "updateKey": None, **console(project)}


async def test_member_events_carry_the_member(
    hooks: Hooks, api: Api, owner: Account, receiver: Receiver
) -> None:
    project = await api.project(owner)
    await hooks.create(owner, project["id"], receiver.url, ALL, receiver=receiver)
    carol = await api.register("carol@example.com")
    member = await api.add_member(owner, project["id"], carol, "tester")
    [added] = await _events(hooks, receiver)
    assert added == {
        "type": "member.added",
        "timestamp": added["timestamp"],
        "data": {**member, **console(project)},
    }

    url = f"/api/projects/{project['id']}/members/{carol.user['id']}"
    r = await hooks.client.put(url, json={"role": "developer"}, headers=owner.headers)
    assert r.status_code == 200
    [changed] = await _events(hooks, receiver)
    assert changed["type"] == "member.role_changed"
    assert changed["data"] == {**r.json(), **console(project), "previousRole": "tester"}
    r = await hooks.client.put(url, json={"role": "developer"}, headers=owner.headers)
    assert r.status_code == 200
    assert await _events(hooks, receiver) == []  # the same role: no change, no event

    r = await hooks.client.delete(url, headers=carol.headers)  # carol leaves
    assert r.status_code == 204
    [removed] = await _events(hooks, receiver)
    assert removed["type"] == "member.removed"
    assert removed["data"] == {**member, "role": "developer", **console(project)}


async def test_a_change_that_fails_emits_nothing(
    hooks: Hooks, api: Api, owner: Account, receiver: Receiver
) -> None:
    project = await api.project(owner)
    await hooks.create(owner, project["id"], receiver.url, ALL, receiver=receiver)
    # The last owner cannot leave: the request fails, and no member.removed goes out.
    r = await hooks.client.delete(
        f"/api/projects/{project['id']}/members/{owner.user['id']}", headers=owner.headers
    )
    assert r.status_code == 409
    assert await _events(hooks, receiver) == []


async def test_build_distributed_is_emitted_with_what_the_distribution_adds(
    hooks: Hooks, api: Api, owner: Account, receiver: Receiver
) -> None:
    project = await api.project(owner)
    app = await api.application(owner, project["id"])
    build = await api.upload(owner, project["id"], app["id"])
    await hooks.create(owner, project["id"], receiver.url, ["build.distributed"], receiver)
    tester = await api.register("tester@example.com")
    await api.add_member(owner, project["id"], tester, "tester")
    base = f"/api/app-distribution/{project['id']}/{app['id']}/builds/{build['buildId']}"

    r = await hooks.client.post(
        f"{base}/distribute", json={"emails": ["tester@example.com"]}, headers=owner.headers
    )
    assert r.status_code == 200, r.text
    [distributed] = await _events(hooks, receiver)
    assert distributed["type"] == "build.distributed"
    shown = (await hooks.client.get(base, headers=owner.headers)).json()
    # The tester's own link, mailed to them, is no install link of the build's to show.
    assert shown["installUrl"] is None
    assert distributed["data"] == {
        **shown,
        "groups": r.json()["groups"],
        "testersReached": r.json()["testersReached"],
        "notified": r.json()["notified"],
        "invitationsPending": r.json()["invitationsPending"],
        "unsubscribed": r.json()["unsubscribed"],
        **told(owner, app, build, f"/builds/{build['buildId']}"),
    }


async def test_an_event_for_one_endpoint_is_written_in_one_statement_where_the_database_allows(
    hooks: Hooks, api: Api, owner: Account, receiver: Receiver
) -> None:
    # The delivery and its outbox job are written in the request of the change: on PostgreSQL
    # one statement (one round trip), on SQLite, which has no INSERT inside a WITH, two.
    project = await api.project(owner)
    await hooks.create(owner, project["id"], receiver.url, ALL, receiver=receiver)
    carol = await api.register("carol@example.com")
    run = statements_run(hooks.app)
    await api.add_member(owner, project["id"], carol, "tester")
    postgresql = hooks.ctx.engine.dialect.name == "postgresql"
    outbox = [
        s
        for s in run
        if s.lstrip().upper().startswith(("INSERT", "WITH"))
        and ("webhook_deliveries" in s or "INTO jobs" in s)
    ]
    assert len(outbox) == (1 if postgresql else 2), outbox
    if postgresql:
        assert "webhook_deliveries" in outbox[0]
        assert "INTO jobs" in outbox[0]
    [added] = await _events(hooks, receiver)
    assert added["type"] == "member.added"

"""Staged rollout: `PUT .../builds/{id}/channels` sets the share of a channel's installs that a
build is offered to, the build shows it per channel, its changes join the build's history, and
`GET /api/updates/check` honours it by a stable bucket of the caller's `installId`."""

from __future__ import annotations

import hashlib
import math
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from buildbay.builds.history import BuildEventRecord, history_of
from buildbay.config import Settings
from buildbay.db.reads import Reads
from buildbay.updates.check import rollout_bucket
from tests.conftest import Account, Api, assert_problem
from tests.updates.conftest import android, publish

CHECK = "/api/updates/check"
INSTALLS = 2000


@pytest.fixture
def settings(settings: Settings) -> Settings:
    settings.rate_limit_enabled = False  # thousands of checks from one address
    return settings


async def _app(api: Api, owner: Account, *channels: str) -> dict[str, Any]:
    project = await api.project(owner)
    app = await api.application(owner, project["id"])
    base = f"/api/projects/{app['projectId']}/applications/{app['id']}/channels"
    for name in channels:
        r = await api.client.post(base, json={"name": name}, headers=owner.headers)
        assert r.status_code == 201, r.text
    return app


def _channels_url(build: dict[str, Any]) -> str:
    return (
        f"/api/app-distribution/{build['projectId']}/{build['applicationId']}/builds/"
        f"{build['buildId']}/channels"
    )


async def put_channels(
    client: httpx.AsyncClient, owner: Account, build: dict[str, Any], body: dict[str, Any]
) -> httpx.Response:
    return await client.put(_channels_url(build), json=body, headers=owner.headers)


async def set_rollout(
    client: httpx.AsyncClient, owner: Account, build: dict[str, Any], body: dict[str, Any]
) -> dict[str, Any]:
    r = await put_channels(client, owner, build, body)
    assert r.status_code == 200, r.text
    shown: dict[str, Any] = r.json()
    return shown


async def offered(client: httpx.AsyncClient, app: dict[str, Any], **params: Any) -> str | None:
    """The build id the check offers (None: no update)."""
    r = await client.get(CHECK, params={"key": app["updateKey"], **params})
    assert r.status_code == 200, r.text
    build = r.json()["build"]
    return None if build is None else str(build["buildId"])


def install_ids(count: int = INSTALLS) -> list[str]:
    """Ids as apps make them: random-looking (here, fixed: a test that can be rerun)."""
    return [hashlib.sha256(f"install {n}".encode()).hexdigest()[:32] for n in range(count)]


def six_sigma(n: int, percent: int) -> float:
    """Six standard deviations of how many of n installs a fair bucket puts under percent."""
    p = percent / 100
    return 6 * math.sqrt(n * p * (1 - p))


# -- the API -----------------------------------------------------------------------------------


async def test_a_build_shows_its_rollout_per_channel_and_an_old_body_keeps_it(
    api: Api, client: httpx.AsyncClient, owner: Account
) -> None:
    app = await _app(api, owner, "beta")
    build = await publish(client, owner, app, android(2))
    assert build["channels"] == ["default"]
    assert build["rolloutPercents"] == {"default": 100}

    shown = await set_rollout(client, owner, build, {"channels": ["default"], "rolloutPercent": 10})
    assert shown["channels"] == ["default"]
    assert shown["rolloutPercents"] == {"default": 10}
    # A body of before (channels only) keeps each channel's percentage; beta joins at 100.
    shown = await set_rollout(client, owner, build, {"channels": ["default", "beta"]})
    assert shown["rolloutPercents"] == {"beta": 100, "default": 10}
    # One per channel, the per-channel one winning over the common one.
    shown = await set_rollout(
        client, owner, build,
        {"channels": ["beta", "default"], "rolloutPercent": 40, "rolloutPercents": {"beta": 75}},
    )  # fmt: skip
    assert shown["rolloutPercents"] == {"beta": 75, "default": 40}
    r = await client.get(_channels_url(build).removesuffix("/channels"), headers=owner.headers)
    assert r.status_code == 200
    assert r.json()["rolloutPercents"] == {"beta": 75, "default": 40}
    # Off a channel and back: it starts again at 100.
    shown = await set_rollout(client, owner, build, {"channels": ["beta"]})
    assert shown["rolloutPercents"] == {"beta": 75}
    shown = await set_rollout(client, owner, build, {"channels": ["beta", "default"]})
    assert shown["rolloutPercents"] == {"beta": 75, "default": 100}
    assert (await set_rollout(client, owner, build, {"channels": []}))["rolloutPercents"] == {}


@pytest.mark.parametrize("percent", [0, 101, -5, 50.5, "50", True, 1e9])
async def test_a_percent_out_of_1_to_100_or_not_a_whole_number_is_422(
    api: Api, client: httpx.AsyncClient, owner: Account, percent: object
) -> None:
    app = await _app(api, owner)
    build = await publish(client, owner, app, android(2))
    r = await put_channels(
        client, owner, build, {"channels": ["default"], "rolloutPercent": percent}
    )
    body = assert_problem(r, 422)
    assert [e["field"] for e in body["errors"]] == ["rolloutPercent"], body
    r = await put_channels(
        client, owner, build, {"channels": ["default"], "rolloutPercents": {"default": percent}}
    )
    body = assert_problem(r, 422)
    assert body["errors"][0]["field"].startswith("rolloutPercents"), body
    r = await client.get(_channels_url(build).removesuffix("/channels"), headers=owner.headers)
    assert r.json()["rolloutPercents"] == {"default": 100}  # nothing changed


async def test_a_whole_number_written_as_a_float_is_that_number(
    api: Api, client: httpx.AsyncClient, owner: Account
) -> None:
    """JSON Schema's integer: 30.0 is 30 (as every integer field of the API)."""
    app = await _app(api, owner)
    build = await publish(client, owner, app, android(2))
    shown = await set_rollout(
        client, owner, build, {"channels": ["default"], "rolloutPercent": 30.0}
    )
    assert shown["rolloutPercents"] == {"default": 30}


async def test_rollout_percents_naming_a_channel_not_listed_is_422_and_changes_nothing(
    api: Api, client: httpx.AsyncClient, owner: Account
) -> None:
    app = await _app(api, owner, "beta")
    build = await publish(client, owner, app, android(2))
    r = await put_channels(
        client, owner, build, {"channels": ["default"], "rolloutPercents": {"beta": 20}}
    )
    body = assert_problem(r, 422, "unknown_channel")
    assert body["errors"] == [
        {"field": "rolloutPercents", "message": "names beta, which channels does not list"}
    ]
    r = await put_channels(
        client, owner, build, {"channels": ["default"], "rolloutPercents": {"Not A Name": 20}}
    )
    assert_problem(r, 422)
    r = await client.get(_channels_url(build).removesuffix("/channels"), headers=owner.headers)
    assert r.json()["rolloutPercents"] == {"default": 100}


async def _history(app: FastAPI, build_id: str) -> list[BuildEventRecord]:
    async with app.state.ctx.sessions() as db:
        return await history_of(Reads.within(db), build_id)


async def test_every_change_of_a_percentage_joins_the_builds_history(
    api: Api, client: httpx.AsyncClient, owner: Account, app: FastAPI
) -> None:
    application = await _app(api, owner, "beta")
    build = await publish(client, owner, application, android(2))
    await set_rollout(client, owner, build, {"channels": ["default"], "rolloutPercent": 10})
    await set_rollout(client, owner, build, {"channels": ["default"], "rolloutPercent": 10})
    await set_rollout(client, owner, build, {"channels": ["default"], "rolloutPercent": 50})
    await set_rollout(client, owner, build, {"channels": ["default", "beta"]})  # beta at 100
    await set_rollout(
        client, owner, build, {"channels": ["default", "beta"], "rolloutPercents": {"beta": 5}}
    )
    events = await _history(app, build["buildId"])
    assert [(e.kind, e.detail) for e in reversed(events)] == [
        ("rollout_changed", {"channel": "default", "from": 100, "to": 10}),
        ("rollout_changed", {"channel": "default", "from": 10, "to": 50}),
        ("rollout_changed", {"channel": "beta", "from": 100, "to": 5}),
    ]
    assert {e.actor_id for e in events} == {owner.user["id"]}

    # The history goes with its build.
    r = await client.delete(_channels_url(build).removesuffix("/channels"), headers=owner.headers)
    assert r.status_code == 204, r.text
    assert await _history(app, build["buildId"]) == []


# -- the update check --------------------------------------------------------------------------


def test_the_bucket_is_sha256_of_the_build_and_the_install() -> None:
    """Not Python's hash(), which differs per process: every server answers the same."""
    digest = hashlib.sha256(b"bld_1\ninstall-a").digest()
    assert rollout_bucket("bld_1", "install-a") == int.from_bytes(digest[:8], "big") % 100
    assert {rollout_bucket("bld_1", i) for i in install_ids(1000)} == set(range(100))


async def test_installs_are_offered_a_partial_build_in_proportion_and_the_others_the_previous(
    api: Api, client: httpx.AsyncClient, owner: Account
) -> None:
    app = await _app(api, owner)
    full = await publish(client, owner, app, android(2, "1.1"))
    partial = await publish(client, owner, app, android(3, "1.2"))
    await set_rollout(client, owner, partial, {"channels": ["default"], "rolloutPercent": 25})

    ids = install_ids()
    answers = {i: await offered(client, app, versionCode=1, installId=i) for i in ids}
    # Never nothing: the installs the new build has not reached get the one before it.
    assert set(answers.values()) == {full["buildId"], partial["buildId"]}
    reached = {i for i, build in answers.items() if build == partial["buildId"]}
    assert abs(len(reached) - INSTALLS * 0.25) < six_sigma(INSTALLS, 25), len(reached)
    # Exactly the installs whose bucket is below 25.
    assert reached == {i for i in ids if rollout_bucket(partial["buildId"], i) < 25}
    # The same install, the same answer.
    some = ids[:50]
    assert [await offered(client, app, versionCode=1, installId=i) for i in some] == [
        answers[i] for i in some
    ]
    # An install already on the full build: the partial build or nothing.
    for i in some:
        expected = partial["buildId"] if i in reached else None
        assert await offered(client, app, versionCode=2, installId=i) == expected

    # Raised to 60: everyone reached before stays reached, and more are.
    await set_rollout(client, owner, partial, {"channels": ["default"], "rolloutPercent": 60})
    now = {i: await offered(client, app, versionCode=1, installId=i) for i in ids}
    reached_now = {i for i, build in now.items() if build == partial["buildId"]}
    assert reached <= reached_now
    assert abs(len(reached_now) - INSTALLS * 0.6) < six_sigma(INSTALLS, 60), len(reached_now)
    # At 100: every install, with or without an id.
    await set_rollout(client, owner, partial, {"channels": ["default"], "rolloutPercent": 100})
    assert {await offered(client, app, versionCode=1, installId=i) for i in some} == {
        partial["buildId"]
    }
    assert await offered(client, app, versionCode=1) == partial["buildId"]


async def test_without_an_install_id_a_partial_build_is_not_offered(
    api: Api, client: httpx.AsyncClient, owner: Account
) -> None:
    app = await _app(api, owner)
    full = await publish(client, owner, app, android(2))
    partial = await publish(client, owner, app, android(3))
    await set_rollout(client, owner, partial, {"channels": ["default"], "rolloutPercent": 99})
    assert await offered(client, app, versionCode=1) == full["buildId"]
    assert await offered(client, app, versionCode=2) is None


async def test_the_rollout_is_per_channel(
    api: Api, client: httpx.AsyncClient, owner: Account
) -> None:
    app = await _app(api, owner, "beta")
    build = await publish(client, owner, app, android(3), channels=["default", "beta"])
    await set_rollout(
        client, owner, build,
        {"channels": ["default", "beta"], "rolloutPercents": {"default": 1}},
    )  # fmt: skip
    outside = next(i for i in install_ids() if rollout_bucket(build["buildId"], i) >= 1)
    assert await offered(client, app, versionCode=1, installId=outside) is None
    assert (
        await offered(client, app, versionCode=1, installId=outside, channel="beta")
        == build["buildId"]
    )


async def test_a_mandatory_build_out_of_the_rollout_does_not_make_the_update_mandatory(
    api: Api, client: httpx.AsyncClient, owner: Account
) -> None:
    """...until a build after it reaches the install: skipping it is then mandatory as before."""
    app = await _app(api, owner)
    await publish(client, owner, app, android(2))
    mandatory = await publish(client, owner, app, android(3), mandatory=True)
    await set_rollout(client, owner, mandatory, {"channels": ["default"], "rolloutPercent": 30})
    ids = install_ids(200)
    inside = next(i for i in ids if rollout_bucket(mandatory["buildId"], i) < 30)
    outside = next(i for i in ids if rollout_bucket(mandatory["buildId"], i) >= 30)
    params = {"key": app["updateKey"], "versionCode": 1}

    body = (await client.get(CHECK, params={**params, "installId": inside})).json()
    assert (body["build"]["buildId"], body["mandatory"]) == (mandatory["buildId"], True)
    body = (await client.get(CHECK, params={**params, "installId": outside})).json()
    assert (body["build"]["versionCode"], body["mandatory"]) == (2, False)

    latest = await publish(client, owner, app, android(4))
    body = (await client.get(CHECK, params={**params, "installId": outside})).json()
    assert (body["build"]["buildId"], body["mandatory"]) == (latest["buildId"], True)


async def test_a_partial_build_for_an_older_os_leaves_the_install_the_newest_it_can_run(
    api: Api, client: httpx.AsyncClient, owner: Account
) -> None:
    """The minimum OS still holds inside a rollout: the check falls back past both."""
    app = await _app(api, owner)
    old = await publish(client, owner, app, android(2, min_sdk=24))
    needs_new_os = await publish(client, owner, app, android(3, min_sdk=34))
    partial = await publish(client, owner, app, android(4, min_sdk=34))
    await set_rollout(client, owner, partial, {"channels": ["default"], "rolloutPercent": 50})
    inside = next(i for i in install_ids() if rollout_bucket(partial["buildId"], i) < 50)
    assert (
        await offered(client, app, versionCode=1, installId=inside, os="34") == (partial["buildId"])
    )
    assert await offered(client, app, versionCode=1, installId=inside, os="30") == old["buildId"]
    outside = next(i for i in install_ids() if rollout_bucket(partial["buildId"], i) >= 50)
    assert (
        await offered(client, app, versionCode=1, installId=outside, os="34")
        == (needs_new_os["buildId"])
    )


@pytest.mark.parametrize(
    "install_id", ["", "a" * 129, "has space", "ünïcode", "slash/id", "semi;colon", "a\x00b"]
)
async def test_an_install_id_of_other_characters_or_length_is_422(
    api: Api, client: httpx.AsyncClient, owner: Account, install_id: str
) -> None:
    app = await _app(api, owner)
    r = await client.get(
        CHECK, params={"key": app["updateKey"], "versionCode": 1, "installId": install_id}
    )
    body = assert_problem(r, 422)
    assert [e["field"] for e in body["errors"]] == ["installId"], body


async def test_install_ids_as_apps_make_them_are_accepted(
    api: Api, client: httpx.AsyncClient, owner: Account
) -> None:
    app = await _app(api, owner)
    build = await publish(client, owner, app, android(2))
    for install_id in ["0b6f4f1e-0c7e-4a43-9d3c-5f0d4f3e2a11", "a" * 128, "x", "A1._:-z"]:
        assert await offered(client, app, versionCode=1, installId=install_id) == build["buildId"]

"""GET /api/updates/check: the newest ready build of the caller's channel newer than the caller
and installable on its OS, whether the update is mandatory, caching and the update key."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from buildbay.clock import FrozenClock
from buildbay.config import Settings
from tests.builds.test_metadata import INFO, ipa
from tests.conftest import Account, Api, assert_problem
from tests.updates.conftest import android, bundle, publish

CHECK = "/api/updates/check"


@pytest.fixture
def settings(settings: Settings) -> Settings:
    settings.rate_limit_enabled = False  # the hypothesis test alone passes 120 checks per IP
    return settings


async def _app(api: Api, owner: Account) -> dict[str, Any]:
    project = await api.project(owner)
    return await api.application(owner, project["id"])


async def check(client: httpx.AsyncClient, app: dict[str, Any], **params: Any) -> dict[str, Any]:
    r = await client.get(CHECK, params={"key": app["updateKey"], **params})
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


async def test_the_newest_newer_build_by_version_code(
    api: Api, client: httpx.AsyncClient, owner: Account
) -> None:
    app = await _app(api, owner)
    await publish(client, owner, app, android(10, "1.0"), notes="first")
    newest = await publish(client, owner, app, android(30, "1.2"), notes="third")
    await publish(client, owner, app, android(20, "1.1"))  # uploaded last, older

    body = await check(client, app, versionCode=10)
    assert body["updateAvailable"] is True
    assert body["mandatory"] is False
    build = body["build"]
    assert build["buildId"] == newest["buildId"]
    assert build["versionCode"] == 30
    assert build["versionName"] == "1.2"
    assert build["notes"] == "third"
    assert build["sha256"] == newest["sha256"]
    assert build["installUrl"].startswith("http")
    assert "/install/" in build["installUrl"]
    r = await client.get(build["installUrl"])  # a live install page
    assert r.status_code == 200
    r = await client.get(build["downloadUrl"])  # the signed file address
    assert r.status_code == 200
    assert len(r.content) == build["fileSize"]

    assert (await check(client, app, versionCode=30)) == {
        "updateAvailable": False,
        "mandatory": False,
        "build": None,
    }


async def test_version_names_compare_as_versions_when_codes_are_missing(
    api: Api, client: httpx.AsyncClient, owner: Account
) -> None:
    app = await _app(api, owner)
    ten = await publish(client, owner, app, android(5, "1.10"))
    await publish(client, owner, app, android(6, "1.9"))
    await publish(client, owner, app, android(7, "1.10.0-beta.1"))
    body = await check(client, app, versionName="1.9")
    assert body["build"]["buildId"] == ten["buildId"]
    # A pre-release of 1.10 is newer than 1.9 but older than 1.10.
    body = await check(client, app, versionName="1.10.0-alpha")
    assert body["build"]["buildId"] == ten["buildId"]
    assert (await check(client, app, versionName="1.10"))["build"] is None


async def test_a_skipped_mandatory_build_still_makes_the_update_mandatory(
    api: Api, client: httpx.AsyncClient, owner: Account
) -> None:
    app = await _app(api, owner)
    await publish(client, owner, app, android(2), mandatory=True)
    latest = await publish(client, owner, app, android(3))
    body = await check(client, app, versionCode=1)
    assert body["build"]["buildId"] == latest["buildId"]
    assert body["mandatory"] is True
    # Past the mandatory one: not mandatory any more.
    assert (await check(client, app, versionCode=2))["mandatory"] is False


async def test_channels_are_isolated(api: Api, client: httpx.AsyncClient, owner: Account) -> None:
    app = await _app(api, owner)
    channels = f"/api/projects/{app['projectId']}/applications/{app['id']}/channels"
    r = await client.post(channels, json={"name": "beta"}, headers=owner.headers)
    assert r.status_code == 201
    stable = await publish(client, owner, app, android(2))
    beta = await publish(client, owner, app, android(3), channels=["beta"], mandatory=True)
    body = await check(client, app, versionCode=1)
    assert body["build"]["buildId"] == stable["buildId"]
    assert body["mandatory"] is False  # beta's mandatory build is not on default
    body = await check(client, app, versionCode=1, channel="beta")
    assert body["build"]["buildId"] == beta["buildId"]


async def test_an_unknown_channel_is_404_not_no_update(
    api: Api, client: httpx.AsyncClient, owner: Account
) -> None:
    """A typo in the app's channel is noticed: not an answer that there is nothing new."""
    app = await _app(api, owner)
    await publish(client, owner, app, android(2))
    for channel in ["nightly", "Default", "default "]:
        r = await client.get(CHECK, params={"key": app["updateKey"], "versionCode": 1,
                                            "channel": channel})  # fmt: skip
        assert_problem(r, 404, "unknown_channel")
        assert f'no release channel named "{channel}"' in r.json()["detail"]
    # A channel with nothing newer is an answer: no update.
    assert (await check(client, app, versionCode=5))["build"] is None


async def test_only_builds_the_os_can_install_are_offered(
    api: Api, client: httpx.AsyncClient, owner: Account
) -> None:
    app = await _app(api, owner)
    old_os = await publish(client, owner, app, android(2, min_sdk=21))
    await publish(client, owner, app, android(3, min_sdk=34))
    body = await check(client, app, versionCode=1, platform="android", os="28")
    assert body["build"]["buildId"] == old_os["buildId"]
    body = await check(client, app, versionCode=1, platform="android", os="34")
    assert body["build"]["versionCode"] == 3
    assert (await check(client, app, versionCode=1, platform="ios"))["build"] is None


async def test_an_app_bundle_is_never_offered(
    api: Api, client: httpx.AsyncClient, owner: Account
) -> None:
    """An .aab is for Google Play: no phone installs it, with or without `platform`."""
    app = await _app(api, owner)
    apk = await publish(client, owner, app, android(2))
    await publish(client, owner, app, bundle(3), "app.aab")
    for params in [{}, {"platform": "android"}, {"platform": "android", "os": "34"}]:
        body = await check(client, app, versionCode=1, **params)
        assert body["build"]["buildId"] == apk["buildId"]
        assert body["build"]["versionCode"] == 2
    assert (await check(client, app, versionCode=2))["build"] is None
    # A mandatory bundle does not make the device's update mandatory: it cannot install it.
    await publish(client, owner, app, bundle(4), "app.aab", mandatory=True)
    assert (await check(client, app, versionCode=1))["mandatory"] is False


async def test_a_device_is_offered_only_its_platform_s_files(
    api: Api, client: httpx.AsyncClient, owner: Account
) -> None:
    """A Windows application's installer (its version given at verify: an .msi does not say
    it) is offered to a Windows device, and to one that does not say (by its application), never
    to a phone."""
    project = await api.project(owner)
    app = await api.application(owner, project["id"], platform="windows")
    msi = bytes.fromhex("d0cf11e0a1b11ae1") + bytes(504)  # a compound file's signature
    installer = await publish(client, owner, app, msi, "setup.msi", version="1.3")

    for params in [{}, {"platform": "windows"}]:
        body = await check(client, app, versionName="1.2", **params)
        assert body["build"]["buildId"] == installer["buildId"], params
    for params in [{"platform": "android"}, {"platform": "iOS"}]:
        assert (await check(client, app, versionName="1.2", **params))["build"] is None, params


async def test_an_application_s_platform_is_the_device_s_when_it_does_not_say(
    api: Api, client: httpx.AsyncClient, owner: Account
) -> None:
    project = await api.project(owner)
    app = await api.application(owner, project["id"], platform="android")
    phone = await publish(client, owner, app, android(2))
    await publish(client, owner, app, bundle(3), "app.aab")
    body = await check(client, app, versionCode=1)
    assert body["build"]["buildId"] == phone["buildId"]
    # Its devices are Android: an iPhone asking is offered nothing.
    assert (await check(client, app, versionCode=1, platform="ios"))["build"] is None


async def test_ios_builds_follow_minimum_os_version(
    api: Api, client: httpx.AsyncClient, owner: Account
) -> None:
    app = await _app(api, owner)
    info = {**INFO, "CFBundleVersion": "900", "MinimumOSVersion": "17.2"}
    build = await publish(client, owner, app, ipa(info).getvalue(), "app.ipa")
    assert (await check(client, app, versionCode=812, platform="ios", os="17.1"))["build"] is None
    body = await check(client, app, versionCode=812, platform="ios", os="17.10")
    assert body["build"]["buildId"] == build["buildId"]
    assert body["build"]["versionName"] == "2.4.0"


async def test_a_build_without_a_version_code_is_compared_by_name_with_a_caller_that_has_one(
    api: Api, client: httpx.AsyncClient, owner: Account
) -> None:
    """The check reads only builds with a higher versionCode than the caller's, or none."""
    app = await _app(api, owner)
    lower = {**INFO, "CFBundleShortVersionString": "1.5", "CFBundleVersion": "400"}
    await publish(client, owner, app, ipa(lower).getvalue(), "app.ipa")  # lower code: not newer
    info = {**INFO, "CFBundleShortVersionString": "3.0", "CFBundleVersion": "3.0.1"}
    named = await publish(client, owner, app, ipa(info).getvalue(), "app.ipa")  # no code

    body = await check(client, app, versionCode=500, versionName="2.0")

    assert body["build"]["buildId"] == named["buildId"]
    assert body["build"]["versionCode"] is None
    assert (await check(client, app, versionCode=500, versionName="3.0"))["build"] is None


async def test_deleted_and_pending_builds_are_never_offered(
    api: Api, client: httpx.AsyncClient, owner: Account
) -> None:
    app = await _app(api, owner)
    kept = await publish(client, owner, app, android(2))
    doomed = await publish(client, owner, app, android(3))
    base = f"/api/app-distribution/{app['projectId']}/{app['id']}/builds"
    r = await client.delete(f"{base}/{doomed['buildId']}", headers=owner.headers)
    assert r.status_code == 204
    data = android(4)
    r = await client.post(
        f"{base}/upload-link",
        json={"fileName": "app.apk", "fileSize": len(data)},
        headers=owner.headers,
    )
    link = r.json()
    await client.put(link["uploadUrl"], content=data, headers=link["uploadHeaders"])
    # Published to a channel before it is ready: still not offered.
    r = await client.put(
        f"{base}/{link['buildId']}/channels", json={"channels": ["default"]}, headers=owner.headers
    )
    assert r.status_code == 200
    assert (await check(client, app, versionCode=1))["build"]["buildId"] == kept["buildId"]


async def test_etag_and_304(api: Api, client: httpx.AsyncClient, owner: Account) -> None:
    app = await _app(api, owner)
    await publish(client, owner, app, android(2))
    params = {"key": app["updateKey"], "versionCode": 1}
    r = await client.get(CHECK, params=params)
    assert r.headers["cache-control"] == "public, max-age=60"
    etag = r.headers["etag"]
    r = await client.get(CHECK, params=params, headers={"If-None-Match": etag})
    assert r.status_code == 304
    assert r.headers["etag"] == etag
    assert r.content == b""
    r = await client.get(CHECK, params=params, headers={"If-None-Match": f'"other", W/{etag}'})
    assert r.status_code == 304
    await publish(client, owner, app, android(3))  # a new build: a new answer
    r = await client.get(CHECK, params=params, headers={"If-None-Match": etag})
    assert r.status_code == 200
    assert r.json()["build"]["versionCode"] == 3


async def test_a_rotated_key_answers_for_seven_days(
    api: Api, client: httpx.AsyncClient, owner: Account, clock: FrozenClock
) -> None:
    app = await _app(api, owner)
    await publish(client, owner, app, android(2))
    old = app["updateKey"]
    assert old.startswith("bbu_")
    path = f"/api/projects/{app['projectId']}/applications/{app['id']}/update-key"
    r = await client.post(path, headers=owner.headers)
    assert r.status_code == 200, r.text
    new = r.json()["updateKey"]
    assert new.startswith("bbu_")
    assert new != old
    for key in (old, new):
        r = await client.get(CHECK, params={"key": key, "versionCode": 1})
        assert r.json()["build"]["versionCode"] == 2
    clock.advance(hours=24 * 7 - 1)
    assert (await client.get(CHECK, params={"key": old, "versionCode": 1})).status_code == 200
    clock.advance(hours=2)
    r = await client.get(CHECK, params={"key": old, "versionCode": 1})
    assert_problem(r, 404, "unknown_update_key")
    r = await client.get(CHECK, params={"key": new, "versionCode": 1})
    assert r.status_code == 200


async def test_unknown_keys_and_missing_versions(
    api: Api, client: httpx.AsyncClient, owner: Account
) -> None:
    app = await _app(api, owner)
    for key in ["bbu_nope", "nope", ""]:
        r = await client.get(CHECK, params={"key": key, "versionCode": 1})
        assert_problem(r, 404, "unknown_update_key")
    r = await client.get(CHECK, params={"key": app["updateKey"]})
    assert r.status_code == 422
    r = await client.get(CHECK, params={"key": app["updateKey"], "versionName": "latest"})
    assert r.status_code == 422


@hypothesis_settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    params=st.dictionaries(
        st.sampled_from(["channel", "versionCode", "versionName", "platform", "os", "key"]),
        st.text(max_size=120),
    )
)
async def test_odd_input_never_fails(client: httpx.AsyncClient, params: dict[str, str]) -> None:
    r = await client.get(CHECK, params=params)
    assert r.status_code in {200, 404, 422}, r.text

"""A project's devices, as its developers see them: the list (pages, search, who may read it,
whose devices it shows), each device against the newest ad-hoc .ipa of each iOS application,
and the statements a page costs.

Devices are inserted as rows (enrolling is tests/ios/test_enrollment*.py's); builds come through
the real upload and verify, from .ipa files carrying a provisioning profile."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import delete, insert

from buildbay.devices.enums import DevicePlatform
from buildbay.devices.models import BuildProfileDevice, Device
from buildbay.ids import new_id
from tests.builds.test_metadata import ipa, profile
from tests.conftest import Account, Api, assert_problem, statements_run

pytestmark = pytest.mark.usefixtures("no_leaks")

ENROLLED = datetime(2026, 11, 20, 9, 30, tzinfo=UTC)


def udid(n: int) -> str:
    """A UDID of today's form (8 hex digits, a dash, 16), numbered."""
    return f"00008030-{n:016X}"


@dataclass
class Team:
    """A project with an owner, a developer and two testers, and its devices' helpers."""

    app: FastAPI
    client: httpx.AsyncClient
    api: Api
    owner: Account
    developer: Account
    testers: list[Account]
    project_id: str

    async def devices(self, account: Account | None = None, **params: Any) -> httpx.Response:
        return await self.client.get(
            f"/api/projects/{self.project_id}/devices",
            params=params,
            headers=(account or self.developer).headers,
        )

    async def ios_app(self, name: str) -> str:
        created = await self.api.application(self.owner, self.project_id, name, platform="ios")
        return str(created["id"])

    async def ipa_build(self, app_id: str, **profile_fields: Any) -> dict[str, Any]:
        """A ready .ipa of the application whose embedded profile has these fields."""
        extra = {"embedded.mobileprovision": profile(**profile_fields)} if profile_fields else {}
        data = ipa(extra=extra).getvalue()
        return await self.api.upload(self.owner, self.project_id, app_id, data, "App.ipa")


async def add_devices(app: FastAPI, rows: Iterable[dict[str, Any]]) -> list[str]:
    """Devices inserted as enrolled ones (ids in the order given: the later, the newer)."""
    values = []
    for n, row in enumerate(rows):
        values.append(
            {
                "id": new_id("dev"),
                "name": f"Device {n}",
                "model": "iPhone14,2",
                "os_version": "21E236",
                "platform": DevicePlatform.IOS,
                "serial": None,
                "enrolled_at": ENROLLED + timedelta(minutes=n),
                "last_seen_at": ENROLLED + timedelta(minutes=n),
                **row,
            }
        )
    async with app.state.ctx.sessions() as db, db.begin():
        await db.execute(insert(Device), values)
    return [v["id"] for v in values]


@pytest.fixture
async def team(app: FastAPI, client: httpx.AsyncClient, api: Api, owner: Account) -> Team:
    project = await api.project(owner)
    developer = await api.register("dev@example.com")
    testers = [await api.register(f"tester{n}@example.com") for n in (1, 2)]
    await api.add_member(owner, project["id"], developer, "developer")
    for tester in testers:
        await api.add_member(owner, project["id"], tester, "tester")
    return Team(app, client, api, owner, developer, testers, project["id"])


def _user(account: Account) -> str:
    return str(account.user["id"])


async def test_the_list_pages_through_every_member_s_device_newest_first(team: Team) -> None:
    t1, t2 = team.testers
    ids = await add_devices(
        team.app,
        [
            {"user_id": _user(t1), "udid": udid(1), "name": "Ana's iPhone"},
            {"user_id": _user(t2), "udid": udid(2), "name": "Bo's iPad",
             "platform": DevicePlatform.IPADOS, "model": "iPad13,1", "serial": "F9FXK"},
            {"user_id": _user(t1), "udid": udid(3), "name": "Ana's Mac",
             "platform": DevicePlatform.MACOS, "model": "Mac14,2"},
            {"user_id": _user(team.developer), "udid": udid(4), "name": "Dev phone"},
            {"user_id": _user(team.owner), "udid": udid(5), "name": "Owner phone"},
        ],
    )  # fmt: skip

    seen: list[dict[str, Any]] = []
    cursor = None
    for _ in range(3):
        r = await team.devices(limit=2, **({"cursor": cursor} if cursor else {}))
        assert r.status_code == 200, r.text
        body = r.json()
        seen += body["devices"]
        cursor = body["nextCursor"]
    assert cursor is None
    assert [d["id"] for d in seen] == ids[::-1]
    bo = next(d for d in seen if d["udid"] == udid(2))
    assert bo == {
        "id": ids[1],
        "udid": udid(2),
        "name": "Bo's iPad",
        "model": "iPad13,1",
        "osVersion": "21E236",
        "platform": "ipados",
        "serial": "F9FXK",
        "testerId": _user(t2),
        "enrolledAt": "2026-11-20T09:31:00Z",
        "lastSeenAt": "2026-11-20T09:31:00Z",
        "tester": {"id": _user(t2), "email": "tester2@example.com", "name": t2.user["name"]},
        "inProfileOfLatest": {},
    }
    assert body["applications"] == []


async def test_q_finds_by_name_model_udid_and_tester_in_any_case_across_pages(
    team: Team,
) -> None:
    t1, t2 = team.testers
    ids = await add_devices(
        team.app,
        [
            {"user_id": _user(t1), "udid": udid(0xABC), "name": "Kitchen iPad"},
            {"user_id": _user(t2), "udid": udid(2), "name": "50% off_sale"},
            {"user_id": _user(t2), "udid": udid(3), "name": "Phone", "model": "iPhone16,1"},
            {"user_id": _user(t1), "udid": udid(4), "name": "Other"},
            {"user_id": _user(t1), "udid": udid(5), "name": "kitchen phone"},
        ],
    )

    async def found(q: str, limit: int = 100) -> list[str]:
        got: list[str] = []
        cursor = None
        while True:
            r = await team.devices(q=q, limit=limit, **({"cursor": cursor} if cursor else {}))
            assert r.status_code == 200, r.text
            got += [d["id"] for d in r.json()["devices"]]
            cursor = r.json()["nextCursor"]
            if cursor is None:
                return got

    assert await found("KITCHEN", limit=1) == [ids[4], ids[0]]
    assert await found("iphone16") == [ids[2]]
    assert await found(udid(0xABC).lower()) == [ids[0]]
    assert await found("TESTER2@example") == [ids[2], ids[1]]
    # LIKE's wildcards are text like any other.
    assert await found("%") == [ids[1]]
    assert await found("f_s") == [ids[1]]
    assert await found("0% off") == [ids[1]]
    assert await found("nothing like it") == []
    # Blank is no search.
    assert len(await found("   ")) == 5


async def test_a_search_or_cursor_that_is_not_one_is_refused(team: Team) -> None:
    assert_problem(await team.devices(cursor="not-a-cursor"), 422, "invalid_cursor")
    assert_problem(await team.devices(q="x" * 321), 422, "validation_error")
    assert_problem(await team.devices(q="a\x00b"), 422, "validation_error")
    assert_problem(await team.devices(limit=0), 422, "validation_error")


async def test_only_developers_read_it_and_only_the_project_s_members_devices_show(
    team: Team, api: Api
) -> None:
    t1, t2 = team.testers
    stranger = await api.register("stranger@example.com")
    elsewhere = await api.project(stranger, "Elsewhere")
    await api.add_member(stranger, elsewhere["id"], team.owner, "tester")
    mine, strangers, leaver = await add_devices(
        team.app,
        [
            {"user_id": _user(t1), "udid": udid(1)},
            {"user_id": _user(stranger), "udid": udid(2)},
            {"user_id": _user(t2), "udid": udid(3)},
        ],
    )

    assert_problem(await team.devices(t1), 403, "insufficient_role")
    assert_problem(await team.devices(stranger), 403, "not_a_member")
    r = await team.client.get(
        "/api/projects/prj_00000000000000000000000000/devices", headers=team.developer.headers
    )
    assert_problem(r, 404, "project_not_found")

    r = await team.devices(team.owner)
    assert [d["id"] for d in r.json()["devices"]] == [leaver, mine]
    # The stranger's project lists its members' devices: theirs, not the owner's testers'.
    r = await team.client.get(f"/api/projects/{elsewhere['id']}/devices", headers=stranger.headers)
    assert [d["id"] for d in r.json()["devices"]] == [strangers]

    # A tester who leaves takes their devices out of the list.
    r = await team.client.delete(
        f"/api/projects/{team.project_id}/members/{_user(t2)}", headers=t2.headers
    )
    assert r.status_code == 204, r.text
    assert [d["id"] for d in (await team.devices()).json()["devices"]] == [mine]


async def test_each_device_says_whether_each_ios_app_s_newest_ad_hoc_build_installs_on_it(
    team: Team,
) -> None:
    t1, t2 = team.testers
    first, second, third = await add_devices(
        team.app,
        [
            {"user_id": _user(t1), "udid": udid(1)},
            {"user_id": _user(t2), "udid": udid(2)},
            {"user_id": _user(t2), "udid": udid(3)},
        ],
    )
    alpha = await team.ios_app("Alpha")
    beta = await team.ios_app("Beta")
    gamma = await team.ios_app("Gamma")  # no build yet
    await team.api.application(team.owner, team.project_id, "Droid", platform="android")

    # Alpha: an older ad-hoc build with the first device, then the newest with the second (in
    # lower case, as a profile may list it); then an App Store build, which lists no device.
    old_alpha = await team.ipa_build(alpha, ProvisionedDevices=[udid(1)])
    alpha_adhoc = await team.ipa_build(alpha, ProvisionedDevices=[udid(2).lower(), udid(9)])
    await team.ipa_build(alpha, Entitlements={"beta-reports-active": True})
    # Beta: a development build with the first and third.
    beta_dev = await team.ipa_build(
        beta, ProvisionedDevices=[udid(1), udid(3)], Entitlements={"get-task-allow": True}
    )
    assert beta_dev["metadata"]["provisioning"]["type"] == "development"
    assert old_alpha["buildId"] < alpha_adhoc["buildId"]

    r = await team.devices()
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["applications"] == [
        {"applicationId": alpha, "name": "Alpha", "buildId": alpha_adhoc["buildId"]},
        {"applicationId": beta, "name": "Beta", "buildId": beta_dev["buildId"]},
        {"applicationId": gamma, "name": "Gamma", "buildId": None},
    ]
    shown = {d["id"]: d["inProfileOfLatest"] for d in body["devices"]}

    def entry(app_id: str, build: dict[str, Any], included: bool) -> dict[str, Any]:
        return {"applicationId": app_id, "buildId": build["buildId"], "included": included}

    assert shown == {
        first: {alpha: entry(alpha, alpha_adhoc, False), beta: entry(beta, beta_dev, True),
                gamma: None},
        second: {alpha: entry(alpha, alpha_adhoc, True), beta: entry(beta, beta_dev, False),
                 gamma: None},
        third: {alpha: entry(alpha, alpha_adhoc, False), beta: entry(beta, beta_dev, True),
                gamma: None},
    }  # fmt: skip


async def test_a_latest_build_whose_profile_was_not_stored_says_it_does_not_know(
    team: Team,
) -> None:
    """A build verified before devices were has its profile's type in its metadata but no UDID
    stored: whether it includes a device is not known (null), never a wrong `false`."""
    await add_devices(team.app, [{"user_id": _user(team.testers[0]), "udid": udid(1)}])
    alpha = await team.ios_app("Alpha")
    build = await team.ipa_build(alpha, ProvisionedDevices=[udid(1)])
    async with team.app.state.ctx.sessions() as db, db.begin():
        await db.execute(
            delete(BuildProfileDevice).where(BuildProfileDevice.build_id == build["buildId"])
        )

    (shown,) = (await team.devices()).json()["devices"]
    assert shown["inProfileOfLatest"] == {
        alpha: {"applicationId": alpha, "buildId": build["buildId"], "included": None}
    }


async def test_a_page_costs_the_same_statements_however_many_devices_and_apps(
    team: Team,
) -> None:
    t1, t2 = team.testers
    alpha = await team.ios_app("Alpha")
    beta = await team.ios_app("Beta")
    await team.ipa_build(alpha, ProvisionedDevices=[udid(n) for n in range(0, 60, 2)])
    await team.ipa_build(beta, ProvisionedDevices=[udid(n) for n in range(0, 60, 3)])
    await add_devices(team.app, [{"user_id": _user(t1), "udid": udid(n)} for n in range(3)])

    async def statements(**params: Any) -> int:
        run = statements_run(team.app)
        r = await team.devices(**params)
        assert r.status_code == 200, r.text
        return len(run)

    await team.devices()  # the caller's session, read once and then cached (auth/cache.py)
    few = await statements()
    await add_devices(team.app, [{"user_id": _user(t2), "udid": udid(n)} for n in range(3, 60)])
    many = await statements(limit=50)
    r = await team.devices(limit=20)
    searched = await statements(limit=20, cursor=r.json()["nextCursor"], q="device")
    assert few == many == searched
    # The caller's role in the project, the applications' newest builds, the page of devices,
    # and its UDIDs in those builds' profiles.
    assert many == 4, many

"""Which enrolled devices a build installs on (`GET .../builds/{buildId}/devices`): an ad-hoc
.ipa's profile against the project's members' devices, an enterprise or App Store one that any
device installs, one whose profile is not known, and a build that is no .ipa."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from sqlalchemy import delete

from buildbay.db.reads import Reads
from buildbay.devices.models import BuildProfileDevice
from buildbay.devices.reach import build_reach, person_reach, profile_scope
from buildbay.devices.records import ProfileScope
from tests.builds.test_metadata import ipa
from tests.conftest import assert_problem, statements_run
from tests.ios.test_device_lists import Team, add_devices, team, udid

__all__ = ["team"]  # the fixture, shared

pytestmark = pytest.mark.usefixtures("no_leaks")


async def _reach(
    t: Team, app_id: str, build_id: str, account: Any = None, **params: Any
) -> httpx.Response:
    return await t.client.get(
        f"/api/app-distribution/{t.project_id}/{app_id}/builds/{build_id}/devices",
        params=params,
        headers=(account or t.developer).headers,
    )


NOT_LISTED = {
    "includedCount": None,
    "missingCount": None,
    "testersUnableCount": None,
    "included": [],
    "missing": [],
    "nextCursor": None,
}


async def test_an_ad_hoc_build_lists_who_it_includes_and_who_it_misses(team: Team) -> None:
    t1, t2 = team.testers
    stranger = await team.api.register("stranger@example.com")
    ana_phone, ana_ipad, bo_phone, dev_phone, _ = await add_devices(
        team.app,
        [
            {"user_id": t1.user["id"], "udid": udid(1), "name": "Ana's iPhone"},
            {"user_id": t1.user["id"], "udid": udid(2), "name": "Ana's iPad"},
            {"user_id": t2.user["id"], "udid": udid(3), "name": "Bo's iPhone"},
            {"user_id": team.developer.user["id"], "udid": udid(4), "name": "Dev"},
            # Listed by the profile, but not a member's: never shown nor counted.
            {"user_id": stranger.user["id"], "udid": udid(5), "name": "Stranger's"},
        ],
    )
    app_id = await team.ios_app("Alpha")
    build = await team.ipa_build(
        app_id, ProvisionedDevices=[udid(1), udid(3).lower(), udid(5), udid(6)]
    )

    r = await _reach(team, app_id, build["buildId"])

    assert r.status_code == 200, r.text
    body = r.json()
    assert body["buildId"] == build["buildId"]
    assert body["scope"] == "listed"
    assert body["profileType"] == "ad-hoc"
    assert [d["id"] for d in body["included"]] == [bo_phone, ana_phone]
    assert [d["id"] for d in body["missing"]] == [dev_phone, ana_ipad]
    assert body["missing"][0]["tester"] == {
        "id": team.developer.user["id"],
        "email": "dev@example.com",
        "name": team.developer.user["name"],
    }
    assert body["missing"][1]["testerId"] == t1.user["id"]
    # Ana installs on her iPhone; the developer has no device in the profile.
    assert (body["includedCount"], body["missingCount"], body["testersUnableCount"]) == (2, 2, 1)
    assert body["nextCursor"] is None


async def test_the_devices_come_a_page_at_a_time_and_only_those_asked_for(team: Team) -> None:
    t1, t2 = team.testers
    ids = await add_devices(
        team.app,
        [{"user_id": (t1, t2)[n % 2].user["id"], "udid": udid(n)} for n in range(12)],
    )
    app_id = await team.ios_app("Alpha")
    # Every third device: 0 and 6 of the first tester, 3 and 9 of the second.
    build = await team.ipa_build(app_id, ProvisionedDevices=[udid(n) for n in range(0, 12, 3)])
    included = {ids[n] for n in range(0, 12, 3)}

    async def walk(**params: Any) -> tuple[list[str], list[str], list[dict[str, Any]]]:
        got_in: list[str] = []
        got_out: list[str] = []
        bodies = []
        cursor = None
        while True:
            extra = {"cursor": cursor} if cursor else {}
            r = await _reach(team, app_id, build["buildId"], limit=5, **params, **extra)
            assert r.status_code == 200, r.text
            body = r.json()
            bodies.append(body)
            got_in += [d["id"] for d in body["included"]]
            got_out += [d["id"] for d in body["missing"]]
            cursor = body["nextCursor"]
            if cursor is None:
                return got_in, got_out, bodies

    got_in, got_out, bodies = await walk()
    assert len(bodies) == 3
    assert got_in == [i for i in ids[::-1] if i in included]
    assert got_out == [i for i in ids[::-1] if i not in included]
    for body in bodies:  # the counts are the whole build's on every page
        assert (body["includedCount"], body["missingCount"], body["testersUnableCount"]) == (
            4,
            8,
            0,
        )
    only_in, none_out, bodies = await walk(only="included")
    assert (only_in, none_out, len(bodies)) == (got_in, [], 1)
    none_in, only_out, bodies = await walk(only="missing")
    assert (none_in, only_out, len(bodies)) == ([], got_out, 2)
    r = await _reach(team, app_id, build["buildId"], only="all")
    assert_problem(r, 422, "validation_error")


async def test_the_counts_and_a_page_cost_the_same_statements_at_any_size(team: Team) -> None:
    t1, t2 = team.testers
    app_id = await team.ios_app("Alpha")
    build = await team.ipa_build(app_id, ProvisionedDevices=[udid(n) for n in range(0, 80, 2)])
    await add_devices(team.app, [{"user_id": t1.user["id"], "udid": udid(n)} for n in range(3)])
    await _reach(team, app_id, build["buildId"])  # the caller's session, cached from now on

    async def statements(**params: Any) -> int:
        run = statements_run(team.app)
        r = await _reach(team, app_id, build["buildId"], **params)
        assert r.status_code == 200, r.text
        return len(run)

    few = await statements()
    await add_devices(team.app, [{"user_id": t2.user["id"], "udid": udid(n)} for n in range(3, 80)])
    many = await statements(limit=100)
    assert few == many == 4  # the caller's role, the build, the counts, the page


@pytest.mark.parametrize(
    ("fields", "kind"),
    [
        ({"ProvisionsAllDevices": True}, "enterprise"),
        ({"Entitlements": {"beta-reports-active": True}}, "app-store"),
    ],
)
async def test_an_enterprise_or_app_store_build_installs_on_any_device(
    team: Team, fields: dict[str, Any], kind: str
) -> None:
    await add_devices(team.app, [{"user_id": team.testers[0].user["id"], "udid": udid(1)}])
    app_id = await team.ios_app("Alpha")
    build = await team.ipa_build(app_id, **fields)

    r = await _reach(team, app_id, build["buildId"])

    assert r.status_code == 200, r.text
    assert r.json() == {
        "buildId": build["buildId"],
        "scope": "any",
        "profileType": kind,
        **NOT_LISTED,
    }


async def test_an_ipa_whose_profile_was_not_read_is_unknown(team: Team) -> None:
    await add_devices(team.app, [{"user_id": team.testers[0].user["id"], "udid": udid(1)}])
    app_id = await team.ios_app("Alpha")
    # No profile in the file.
    bare = await team.api.upload(team.owner, team.project_id, app_id, ipa().getvalue(), "Bare.ipa")
    # An ad-hoc build verified before devices were: its metadata says ad-hoc, no UDID stored.
    old = await team.ipa_build(app_id, ProvisionedDevices=[udid(1)])
    async with team.app.state.ctx.sessions() as db, db.begin():
        await db.execute(
            delete(BuildProfileDevice).where(BuildProfileDevice.build_id == old["buildId"])
        )

    for build, kind in ((bare, None), (old, "ad-hoc")):
        r = await _reach(team, app_id, build["buildId"])
        assert r.status_code == 200, r.text
        assert r.json() == {
            "buildId": build["buildId"],
            "scope": "unknown",
            "profileType": kind,
            **NOT_LISTED,
        }


async def test_a_build_that_is_no_ipa_has_no_scope(team: Team) -> None:
    app_id = (await team.api.application(team.owner, team.project_id, "Desktop"))["id"]
    build = await team.api.upload(team.owner, team.project_id, app_id, b"MZ a program", "a.exe")

    r = await _reach(team, app_id, build["buildId"])

    assert r.status_code == 200, r.text
    assert r.json() == {"buildId": build["buildId"], "scope": None, "profileType": None,
                        **NOT_LISTED}  # fmt: skip


async def test_only_developers_see_a_build_s_devices(team: Team) -> None:
    app_id = await team.ios_app("Alpha")
    build = await team.ipa_build(app_id, ProvisionedDevices=[udid(1)])
    r = await _reach(team, app_id, build["buildId"], team.testers[0])
    assert_problem(r, 403, "insufficient_role")
    r = await _reach(team, app_id, "bld_00000000000000000000000000")
    assert_problem(r, 404, "build_not_found")


async def test_the_whole_reach_for_a_page_about_one_build_or_one_person(team: Team) -> None:
    """build_reach and person_reach (the console's and the install page's): every device at
    once, each member's, and who cannot install; unknown where the UDIDs were not stored."""
    t1, t2 = team.testers
    ana_phone, ana_ipad, bo_phone = await add_devices(
        team.app,
        [
            {"user_id": t1.user["id"], "udid": udid(1)},
            {"user_id": t1.user["id"], "udid": udid(2)},
            {"user_id": t2.user["id"], "udid": udid(3)},
        ],
    )
    app_id = await team.ios_app("Alpha")
    build = await team.ipa_build(app_id, ProvisionedDevices=[udid(1)])
    scope = profile_scope("App.ipa", build["metadata"])
    assert scope is ProfileScope.LISTED
    reads = Reads.on(team.app.state.ctx.read_engine)
    try:
        reach = await build_reach(reads, team.project_id, build["buildId"], scope)
        assert reach is not None
        assert [d.id for d in reach.included] == [ana_phone]
        assert [d.id for d in reach.missing] == [ana_ipad, bo_phone]
        assert [t.email for t in reach.testers_who_cannot_install()] == ["tester2@example.com"]
        assert await person_reach(reads, t1.user["id"], build["buildId"], scope) == (
            reach.included,
            [reach.missing[0]],
        )
        async with team.app.state.ctx.sessions() as db, db.begin():
            await db.execute(
                delete(BuildProfileDevice).where(BuildProfileDevice.build_id == build["buildId"])
            )
        unknown = await build_reach(reads, team.project_id, build["buildId"], scope)
        assert unknown is not None
        assert (unknown.scope, unknown.included, unknown.missing) == (ProfileScope.UNKNOWN, [], [])
        assert await person_reach(reads, t1.user["id"], build["buildId"], scope) == ([], [])
        assert await build_reach(reads, team.project_id, build["buildId"], None) is None
    finally:
        await reads.close()

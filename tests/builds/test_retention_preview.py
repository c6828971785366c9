"""Retention says what it deletes: the preview names the builds a rule deletes now (and how
many are in testers' hands), the sweeper deletes just those, and by default the newest build
of each tester group and of each channel is kept (`retention.protect`)."""

from __future__ import annotations

from typing import Any

import httpx
from fastapi import FastAPI

from buildbay.builds.sweeper import sweep
from buildbay.clock import FrozenClock
from tests.builds.conftest import Builds
from tests.conftest import assert_problem

OFF = {"groups": False, "channels": False}


class Retention:
    def __init__(self, builds: Builds, app: FastAPI, clock: FrozenClock) -> None:
        self.builds, self.app, self.clock = builds, app, clock
        self.application = f"/api/projects/{builds.project_id}/applications/{builds.app_id}"

    async def call(self, method: str, path: str, body: Any = None) -> httpx.Response:
        return await self.builds.client.request(
            method, path, json=body, headers=self.builds.owner.headers
        )

    async def ok(self, method: str, path: str, body: Any = None) -> Any:
        r = await self.call(method, path, body)
        assert r.status_code in (200, 201), r.text
        return r.json()

    async def preview(self, rule: dict[str, Any]) -> dict[str, Any]:
        preview: dict[str, Any] = await self.ok(
            "POST", f"{self.application}/retention/preview", rule
        )
        return preview

    async def rule(self, rule: dict[str, Any] | None) -> dict[str, Any]:
        application = await self.ok("PUT", self.application, {"retention": rule})
        retention: dict[str, Any] = application["retention"]
        return retention

    async def sweep(self) -> int:
        ctx = self.app.state.ctx
        swept = await sweep(
            ctx.sessions, ctx.storage, self.clock.now(), ctx.settings.resolved_public_url
        )
        return swept.retention

    async def ids(self) -> list[str]:
        listed = await self.ok("GET", self.builds.base)
        return [b["buildId"] for b in listed["builds"]]


async def _five_builds(r: Retention) -> list[str]:
    """Oldest first: the first given to the QA group, the second to everyone, the third
    published to `beta` only, the last two to `default` (and to nobody)."""
    builds = r.builds
    await r.ok("PUT", r.application, {"autoDistributeGroups": []})
    project = f"/api/projects/{builds.project_id}"
    qa = (await r.ok("POST", f"{project}/groups", {"name": "QA"}))["id"]
    await r.ok("POST", f"{r.application}/channels", {"name": "beta"})
    ids = [(await builds.ready(f"build {i}".encode()))["buildId"] for i in range(5)]
    for build_id, groups in ((ids[0], [qa]), (ids[1], ["everyone"])):
        await r.ok(
            "POST",
            f"{builds.base}/{build_id}/distribute",
            {"groups": groups, "notify": False},
        )
    await r.ok("PUT", f"{builds.base}/{ids[2]}/channels", {"channels": ["beta"]})
    return ids


async def test_the_preview_names_what_a_rule_deletes_now_and_changes_nothing(
    builds: Builds, app: FastAPI, clock: FrozenClock
) -> None:
    r = Retention(builds, app, clock)
    ids = await _five_builds(r)

    unprotected = await r.preview({"keepLast": 1, "protect": OFF})

    assert (unprotected["count"], unprotected["distributedCount"]) == (4, 2)
    assert [(b["buildId"], b["distributed"]) for b in unprotected["builds"]] == [
        (ids[3], False),
        (ids[2], False),
        (ids[1], True),
        (ids[0], True),
    ]
    assert set(unprotected["builds"][0]) == {
        "buildId",
        "fileName",
        "version",
        "verifiedAt",
        "distributed",
    }
    # By default the newest of QA (the first), of everyone (the second), of beta (the third) and
    # of default (the newest) stay: only the fourth goes.
    protected = await r.preview({"keepLast": 1})
    assert (protected["count"], protected["distributedCount"]) == (1, 0)
    assert [b["buildId"] for b in protected["builds"]] == [ids[3]]
    assert (await r.preview({}))["count"] == 0  # no rule: nothing goes
    # A preview changes nothing.
    assert await r.ids() == list(reversed(ids))
    assert (await r.ok("GET", r.application))["retention"] == {
        "keepLast": None,
        "keepDays": None,
        "protect": {"groups": True, "channels": True},
    }
    assert await r.sweep() == 0


async def test_the_sweeper_deletes_what_the_preview_named_and_keeps_the_protected(
    builds: Builds, app: FastAPI, clock: FrozenClock
) -> None:
    r = Retention(builds, app, clock)
    ids = await _five_builds(r)

    assert await r.rule({"keepLast": 1}) == {
        "keepLast": 1,
        "keepDays": None,
        "protect": {"groups": True, "channels": True},
    }
    assert await r.sweep() == 1
    assert await r.ids() == [ids[4], ids[2], ids[1], ids[0]]

    named = await r.preview({"keepLast": 1, "protect": {"channels": False}})
    assert [b["buildId"] for b in named["builds"]] == [ids[2]]
    assert await r.rule({"keepLast": 1, "protect": {"channels": False}}) == {
        "keepLast": 1,
        "keepDays": None,
        "protect": {"groups": True, "channels": False},
    }
    assert await r.sweep() == 1
    assert await r.ids() == [ids[4], ids[1], ids[0]]

    await r.rule({"keepLast": 1, "protect": OFF})
    assert await r.sweep() == 2
    assert await r.ids() == [ids[4]]


async def test_keep_days_spares_the_newest_given_to_a_group(
    builds: Builds, app: FastAPI, clock: FrozenClock
) -> None:
    r = Retention(builds, app, clock)
    ids = await _five_builds(r)
    token = await r.ok("POST", "/api/account/api-tokens", {"name": "ci"})
    builds.owner.access_token = token["token"]  # lives past the day-long access token
    clock.advance(days=10)

    preview = await r.preview({"keepDays": 3})

    assert [b["buildId"] for b in preview["builds"]] == [ids[3]]
    await r.rule({"keepDays": 3})
    assert await r.sweep() == 1


async def test_only_an_admin_previews_and_a_bad_rule_is_refused(
    builds: Builds, app: FastAPI, clock: FrozenClock
) -> None:
    r = Retention(builds, app, clock)
    developer = await builds.api.register()
    await builds.api.add_member(builds.owner, builds.project_id, developer, "developer")
    path = f"{r.application}/retention/preview"

    refused = await builds.client.post(path, json={"keepLast": 1}, headers=developer.headers)

    assert_problem(refused, 403, "insufficient_role")
    for bad in ({"keepLast": 0}, {"protect": {"groups": "yes"}}, {"protect": {"other": True}}):
        assert_problem(await r.call("POST", path, bad), 422, "validation_error")


async def test_a_channel_keeps_its_newest_full_build_while_a_newer_one_is_rolled_out(
    builds: Builds, app: FastAPI, clock: FrozenClock
) -> None:
    """The installs outside a staged rollout are offered the build before it: it stays."""
    r = Retention(builds, app, clock)
    ids = [(await builds.ready(f"build {i}".encode()))["buildId"] for i in range(3)]
    for build_id in ids:
        await r.ok("PUT", f"{builds.base}/{build_id}/channels", {"channels": ["default"]})
    assert [b["buildId"] for b in (await r.preview({"keepLast": 1}))["builds"]] == ids[1::-1]

    await r.ok(
        "PUT", f"{builds.base}/{ids[2]}/channels", {"channels": ["default"], "rolloutPercent": 10}
    )
    named = await r.preview({"keepLast": 1})
    assert [b["buildId"] for b in named["builds"]] == [ids[0]]
    await r.rule({"keepLast": 1})
    assert await r.sweep() == 1
    assert await r.ids() == [ids[2], ids[1]]
    # Without protect.channels, the rule alone decides.
    assert [b["buildId"] for b in (await r.preview({"keepLast": 1, "protect": OFF}))["builds"]] == [
        ids[1]
    ]

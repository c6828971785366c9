"""The update check and distribution together: the update key ships inside every installed copy,
so the check offers only builds distributed to everyone. A build kept to a group (verify with the
application's groups, a distribution later, explicit channels at verify or after) is never offered
until it goes to everyone (docs/updates.md, "Who is offered what")."""

from __future__ import annotations

import re
from html import unescape
from typing import Any

from tests.conftest import Account, assert_problem
from tests.distribution.conftest import Team
from tests.distribution.test_counts_seen import console_of
from tests.updates.conftest import android

CHECK = "/api/updates/check"


class Setup:
    def __init__(self, key: str, qa: str, tom: Account) -> None:
        self.key, self.qa, self.tom = key, qa, tom


async def _setup(team: Team, auto_groups: list[str] | None = None) -> Setup:
    """Tess in QA, Tom in no group; the application distributes to `auto_groups` (QA's
    group if not given). Its update key, QA's id and Tom."""
    tess = await team.member("tess@example.com")
    tom = await team.member("tom@example.com")
    qa = await team.group("QA", tess.email)
    groups = [qa] if auto_groups is None else auto_groups
    r = await team.client.put(
        f"/api/projects/{team.project['id']}/applications/{team.application['id']}",
        json={"autoDistributeGroups": groups},
        headers=team.owner.headers,
    )
    assert r.status_code == 200, r.text
    return Setup(r.json()["updateKey"], qa, tom)


async def _verify(team: Team, version_code: int, **verify: Any) -> dict[str, Any]:
    """Upload an .aab of this versionCode and verify it with `verify`'s fields."""
    data = android(version_code, f"1.{version_code}")
    r = await team.client.post(
        f"{team.builds}/upload-link",
        json={"fileName": "app.apk", "fileSize": len(data)},
        headers=team.owner.headers,
    )
    assert r.status_code == 201, r.text
    link = r.json()
    r = await team.client.put(link["uploadUrl"], content=data, headers=link["uploadHeaders"])
    assert r.status_code == 200, r.text
    r = await team.client.post(
        f"{team.builds}/verify",
        json={"buildId": link["buildId"], "notes": f"notes of {version_code}", **verify},
        headers=team.owner.headers,
    )
    assert r.status_code == 200, r.text
    build: dict[str, Any] = r.json()
    return build


async def _check(team: Team, key: str, channel: str = "default") -> dict[str, Any]:
    r = await team.client.get(CHECK, params={"key": key, "channel": channel, "versionCode": 1})
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


NOTHING = {"updateAvailable": False, "mandatory": False, "build": None}


async def _channels(team: Team, account: Account | None = None) -> dict[str, Any]:
    path = f"/api/projects/{team.project['id']}/applications/{team.application['id']}/channels"
    r = await team.client.get(path, headers=(account or team.owner).headers)
    assert r.status_code == 200, r.text
    return {c["name"]: c for c in r.json()["channels"]}


async def _create_channel(team: Team, name: str) -> None:
    path = f"/api/projects/{team.project['id']}/applications/{team.application['id']}/channels"
    r = await team.client.post(path, json={"name": name}, headers=team.owner.headers)
    assert r.status_code == 201, r.text


async def _update_section(team: Team, build_id: str) -> str:
    """The text of the console build page's "In-app updates", as the owner reads it."""
    path = f"/projects/{team.project['id']}/apps/{team.application['id']}/builds/{build_id}"
    async with console_of(team, team.owner) as console:
        r = await console.get(path)
    assert r.status_code == 200, r.text
    found = re.search(r'<section aria-labelledby="updates-title".*?</section>', r.text, re.S)
    assert found, r.text[:500]
    return " ".join(unescape(re.sub(r"<[^>]+>", "", found.group(0))).split())


async def test_a_build_kept_to_a_group_is_not_offered_until_it_goes_to_everyone(
    team: Team,
) -> None:
    app = await _setup(team)
    tom = app.tom
    build = await _verify(team, 20)
    await team.run_jobs()
    # Tom, outside QA, cannot open it; neither can the key that ships in his copy.
    r = await team.client.get(f"{team.builds}/{build['buildId']}", headers=tom.headers)
    assert_problem(r, 403, "not_distributed")
    assert build["channels"] == []
    assert await _check(team, app.key) == NOTHING
    assert (await _channels(team))["default"]["buildsCount"] == 0

    # Distributed to everyone later: it joins `default`, and the check offers it to all.
    result = await team.distribute(build["buildId"], groups=["everyone"], notify=False)
    assert result["groups"] == sorted(["everyone", app.qa])
    body = await _check(team, app.key)
    assert body["updateAvailable"] is True
    assert body["build"]["buildId"] == build["buildId"]
    assert body["build"]["notes"] == "notes of 20"
    r = await team.client.get(f"{team.builds}/{build['buildId']}", headers=tom.headers)
    assert r.status_code == 200, r.text
    assert r.json()["channels"] == ["default"]


async def test_a_build_that_goes_to_everyone_is_offered_at_once(team: Team) -> None:
    app = await _setup(team, ["everyone"])
    build = await _verify(team, 20)
    assert build["channels"] == ["default"]
    body = await _check(team, app.key)
    assert (body["updateAvailable"], body["build"]["buildId"]) == (True, build["buildId"])

    # Given to everyone at verify (the application's groups being QA's): the same.
    r = await team.client.put(
        f"/api/projects/{team.project['id']}/applications/{team.application['id']}",
        json={"autoDistributeGroups": [app.qa]},
        headers=team.owner.headers,
    )
    assert r.status_code == 200, r.text
    newer = await _verify(team, 30, distribute={"groups": ["everyone"], "notify": False})
    assert newer["channels"] == ["default"]
    assert (await _check(team, app.key))["build"]["buildId"] == newer["buildId"]
    # Channels named at verify are where it goes, even as it reaches everyone.
    await _create_channel(team, "beta")
    on_beta = await _verify(
        team, 40, channels=["beta"], distribute={"groups": ["everyone"], "notify": False}
    )
    assert on_beta["channels"] == ["beta"]
    off = await _verify(team, 50, channels=[], distribute={"groups": ["everyone"]})
    assert off["channels"] == []
    assert (await _check(team, app.key))["build"]["buildId"] == newer["buildId"]
    assert (await _check(team, app.key, "beta"))["build"]["buildId"] == on_beta["buildId"]


async def test_a_group_build_released_to_a_channel_is_held_until_it_goes_to_everyone(
    team: Team,
) -> None:
    """The documented rule: channels named for a build kept to a group are recorded (and
    shown), but update checks do not offer it there until it is distributed to everyone;
    a held mandatory build makes no update mandatory."""
    app = await _setup(team)
    await _create_channel(team, "qa")
    offered = await _verify(team, 10, distribute={"groups": ["everyone"], "notify": False})
    held = await _verify(team, 20, channels=["qa", "default"], mandatory=True)
    later = await _verify(team, 30)
    r = await team.client.put(
        f"{team.builds}/{later['buildId']}/channels",
        json={"channels": ["qa"]},
        headers=team.owner.headers,
    )
    assert r.status_code == 200, r.text
    assert (held["channels"], r.json()["channels"]) == (["default", "qa"], ["qa"])

    body = await _check(team, app.key)
    assert body["build"]["buildId"] == offered["buildId"]
    assert body["mandatory"] is False  # the held build's flag says nothing
    assert await _check(team, app.key, "qa") == NOTHING
    # Developers see the channels as released (held builds included).
    channels = await _channels(team)
    assert (channels["qa"]["buildsCount"], channels["qa"]["latestBuildId"]) == (
        2, later["buildId"]
    )  # fmt: skip

    # The build page says so, and why.
    page = await _update_section(team, later["buildId"])
    assert "Released to qa, but update checks do not offer it: it is not distributed to " \
        "everyone." in page  # fmt: skip
    assert "offer it on" not in page
    assert "joins default" in await _update_section(team, (await _verify(team, 5))["buildId"])

    # Deleting QA (the only group they went to) offers them no more than before.
    r = await team.client.delete(f"{team.groups}/{app.qa}", headers=team.owner.headers)
    assert r.status_code == 204, r.text
    assert await _check(team, app.key, "qa") == NOTHING

    # Distributed to everyone, the held build is offered where it was released, and only
    # there: it is on channels already, so it does not join `default` as well.
    await team.distribute(later["buildId"], groups=["everyone"], notify=False)
    body = await _check(team, app.key, "qa")
    assert (body["build"]["buildId"], body["mandatory"]) == (later["buildId"], False)
    assert (await _check(team, app.key))["build"]["buildId"] == offered["buildId"]
    r = await team.client.get(f"{team.builds}/{later['buildId']}", headers=team.owner.headers)
    assert r.json()["channels"] == ["qa"]
    page = await _update_section(team, later["buildId"])
    assert "Update checks offer it on qa." in page
    assert "do not offer" not in page

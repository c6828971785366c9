"""A distribution's reach, as its answer and the build's report say it (issue 36): testers
reached (never the uploader), invitations pending (people not signed up yet, who have the build
when they join), those who unsubscribed from mail; to which groups and people it went, by whom
and when."""

from __future__ import annotations

from typing import Any

from buildbay.clock import FrozenClock
from tests.conftest import iso_z
from tests.distribution.conftest import Team


async def _no_automatic_distribution(team: Team) -> None:
    r = await team.client.put(
        f"/api/projects/{team.project['id']}/applications/{team.application['id']}",
        json={"autoDistributeGroups": []},
        headers=team.owner.headers,
    )
    assert r.status_code == 200, r.text


async def _installs(team: Team, build_id: str) -> dict[str, Any]:
    r = await team.client.get(f"{team.builds}/{build_id}/installs", headers=team.owner.headers)
    assert r.status_code == 200, r.text
    report: dict[str, Any] = r.json()
    return report


async def test_the_answer_says_testers_reached_invitations_pending_and_who_unsubscribed(
    team: Team, clock: FrozenClock
) -> None:
    await _no_automatic_distribution(team)
    tess = await team.member("tess@example.com")
    quiet = await team.member("quiet@example.com")
    r = await team.client.put(
        "/api/auth/me", json={"notifyNewBuilds": False}, headers=quiet.headers
    )
    assert r.status_code == 200, r.text
    qa = await team.group("QA", tess.email, quiet.email, "new@example.com")
    build = await team.upload()

    result = await team.distribute(build["buildId"], groups=[qa])

    assert (result["testersReached"], result["notified"]) == (2, 1)
    assert (result["invitationsPending"], result["unsubscribed"]) == (1, 1)
    await team.run_jobs()
    report = await _installs(team, build["buildId"])
    assert report["distributedTo"] == [
        {"kind": "group", "id": qa, "name": "QA", "distributedBy": team.owner.user["name"],
         "distributedAt": iso_z(clock.now()), "deleted": False},
    ]  # fmt: skip
    assert report["invitedNotSignedUp"] == ["new@example.com"]
    assert (report["testersReached"], report["unsubscribed"]) == (2, 1)


async def test_the_uploader_is_not_counted_as_a_tester(team: Team) -> None:
    await _no_automatic_distribution(team)
    dev = await team.member("dev@example.com", "developer")
    tess = await team.member("tess@example.com")
    build = await team.upload(dev)

    result = await team.distribute(build["buildId"], groups=["everyone"])

    # The owner distributing it and Tess are reached; Dev uploaded it.
    assert result["testersReached"] == 2
    result = await team.distribute(build["buildId"], emails=[dev.email, tess.email])
    assert result["testersReached"] == 0
    await team.run_jobs()
    report = await _installs(team, build["buildId"])
    assert report["testersReached"] == 2


async def test_people_named_by_email_are_listed_with_who_named_them_and_when(
    team: Team, clock: FrozenClock
) -> None:
    await _no_automatic_distribution(team)
    dev = await team.member("dev@example.com", "developer")
    tess = await team.member("tess@example.com")
    build = await team.upload()
    clock.advance(hours=2)

    r = await team.client.post(
        f"{team.builds}/{build['buildId']}/distribute",
        json={"emails": [tess.email, "new@example.com"]},
        headers=dev.headers,
    )
    assert r.status_code == 200, r.text
    assert (r.json()["testersReached"], r.json()["invitationsPending"]) == (1, 1)

    report = await _installs(team, build["buildId"])
    by = {"distributedBy": dev.user["name"], "distributedAt": iso_z(clock.now()),
          "deleted": False}  # fmt: skip
    assert report["distributedTo"] == [
        {"kind": "person", "id": "new@example.com", "name": "new@example.com", **by},
        {"kind": "person", "id": tess.email, "name": tess.user["name"], **by},
    ]
    assert report["invitedNotSignedUp"] == ["new@example.com"]


async def test_a_verify_to_groups_records_the_uploader_as_who_distributed_it(team: Team) -> None:
    qa = await team.group("QA")
    r = await team.client.put(
        f"/api/projects/{team.project['id']}/applications/{team.application['id']}",
        json={"autoDistributeGroups": ["everyone", qa]},
        headers=team.owner.headers,
    )
    assert r.status_code == 200, r.text
    build = await team.upload()

    report = await _installs(team, build["buildId"])

    assert [(d["id"], d["distributedBy"]) for d in report["distributedTo"]] == [
        ("everyone", team.owner.user["name"]),
        (qa, team.owner.user["name"]),
    ]
    assert report["testersReached"] == 0  # only the owner, who uploaded it

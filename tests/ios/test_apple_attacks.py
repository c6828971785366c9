"""Issue 37's registration with Apple as an attacker tries it: devices Apple refuses (a tester
may enroll any UDID: devices/cms.py) must not keep "register all missing" from the others, nor
be sent to Apple again by each call of a client that goes on."""

from __future__ import annotations

import pytest

from tests.conftest import Api, assert_problem
from tests.ios.apple_receiver import Answer, AppleReceiver, apple_error, new_team_key
from tests.ios.test_apple_registrations import Team, receiver, settings, team

__all__ = ["receiver", "settings", "team"]  # the fixtures, shared

pytestmark = pytest.mark.usefixtures("no_leaks")

REFUSED = apple_error(
    409, "ENTITY_ERROR.ATTRIBUTE.INVALID", "An attribute value is invalid.",
    "An invalid value was provided for the parameter 'udid'.",
)  # fmt: skip


async def test_twenty_devices_apple_refuses_do_not_keep_register_all_from_the_next(
    team: Team, receiver: AppleReceiver
) -> None:
    devices = [await team.device(team.tester) for _ in range(21)]
    receiver.answers += [Answer(409, REFUSED) for _ in range(20)]

    first = await team.register_all()

    assert first.status_code == 200, first.text
    body = first.json()
    assert (body["registrations"], len(body["refused"]), body["remaining"]) == ([], 20, 21)
    assert body["lastSent"] == devices[19]["id"]

    # Going on after the last device sent: the 21st, and none of the refused ones again.
    second = await team.client.post(
        f"/api/projects/{team.id}/devices/register-with-apple",
        params={"after": body["lastSent"]},
        headers=team.developer.headers,
    )

    assert second.status_code == 200, second.text
    body = second.json()
    assert [r["deviceId"] for r in body["registrations"]] == [devices[20]["id"]]
    assert (body["refused"], body["remaining"], body["lastSent"]) == ([], 20, devices[20]["id"])
    assert len(receiver.received) == 21
    third = await team.client.post(
        f"/api/projects/{team.id}/devices/register-with-apple",
        params={"after": body["lastSent"]},
        headers=team.developer.headers,
    )
    assert third.json() == {"registrations": [], "refused": [], "remaining": 20, "lastSent": None}
    assert len(receiver.received) == 21


async def test_after_must_be_a_device_id(team: Team, receiver: AppleReceiver) -> None:
    for after in ("x", "dev_' OR 1=1", "dev_\u0000"):
        r = await team.client.post(
            f"/api/projects/{team.id}/devices/register-with-apple",
            params={"after": after},
            headers=team.developer.headers,
        )
        assert_problem(r, 422, "validation_error")
    assert receiver.received == []


async def test_no_more_than_a_hundred_registrations_an_hour_go_to_apple_for_a_project(
    team: Team, receiver: AppleReceiver, api: Api
) -> None:
    """However often a developer (or a loop of theirs) calls, the project's key's quota at
    Apple, which the team's other tools share, is not spent on the devices Apple refuses again
    and again: 100 an hour (Apple registers at most 100 of a kind a year)."""
    devices = [await team.device(team.tester) for _ in range(20)]
    receiver.answers += [Answer(409, REFUSED) for _ in range(100)]

    for _ in range(5):  # from the start each time: the same twenty, refused
        r = await team.register_all()
        assert r.status_code == 200, r.text
        assert len(r.json()["refused"]) == 20
    r = await team.register_all()

    problem = assert_problem(r, 429, "apple_requests_throttled")
    assert 0 < int(r.headers["retry-after"]) <= 3600
    assert "100 device registrations in the last hour" in problem["detail"]
    assert (problem["registered"], problem["remaining"]) == ([], 20)
    r = await team.register(devices[0]["id"])
    assert_problem(r, 429, "apple_requests_throttled")
    assert len(receiver.received) == 100
    # Another project's budget is its own.
    other = await api.project(team.owner, "Other")
    await api.add_member(team.owner, other["id"], team.tester, "tester")
    key = receiver.trust(new_team_key())
    r = await team.client.put(
        f"/api/projects/{other['id']}/apple-api-key", json=key.body(), headers=team.owner.headers
    )
    assert r.status_code == 200, r.text
    r = await team.client.post(
        f"/api/projects/{other['id']}/devices/{devices[0]['id']}/register-with-apple",
        headers=team.owner.headers,
    )
    assert r.status_code == 200, r.text

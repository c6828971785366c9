"""Issue 37's registration with Apple as an attacker tries it: devices Apple refuses (a tester
may enroll any UDID: devices/cms.py) must not keep "register all missing" from the others, nor
be sent to Apple again by each call of a client that goes on."""

from __future__ import annotations

import pytest

from tests.conftest import assert_problem
from tests.ios.apple_receiver import Answer, AppleReceiver, apple_error
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

"""Registering the project's devices with Apple, against a receiver of our own that checks each
request as Apple documents it (tests/ios/apple_receiver.py): one device, or all the missing ones
(only those, idempotent, 20 at a time), and each of Apple's answers mapped to a clear problem,
never a 500."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import select

from buildbay.clock import FrozenClock
from buildbay.config import ConfigurationError, Settings
from buildbay.db.reads import Reads
from buildbay.devices.apple.registrations import registrations_by_device
from buildbay.devices.enums import DevicePlatform
from buildbay.devices.models import AppleDeviceRegistration
from tests.conftest import Account, Api, assert_problem, iso_z
from tests.ios.apple_receiver import (
    Answer,
    AppleReceiver,
    TeamKey,
    apple_error,
    apple_receiving,
    enrolled,
    new_team_key,
)
from tests.processes import free_port

pytestmark = pytest.mark.usefixtures("no_leaks")

LIMIT = apple_error(
    403, "FORBIDDEN_ERROR", "This request is forbidden for security reasons",
    "Your development team has reached the maximum number of registered iPhone devices.",
)  # fmt: skip


@pytest.fixture
def receiver(clock: FrozenClock) -> Iterator[AppleReceiver]:
    with apple_receiving() as r:
        r.now_from(clock.now)
        yield r


@pytest.fixture
def settings(settings: Settings, receiver: AppleReceiver) -> Settings:
    settings.apple_api_url = receiver.url
    settings.apple_api_timeout_seconds = 10
    return settings


class Team:
    """A project with a key Apple knows, an owner, a developer and a tester, and helpers to
    enroll their devices and register them."""

    def __init__(
        self, client: httpx.AsyncClient, api: Api, app: FastAPI, receiver: AppleReceiver
    ) -> None:
        self.client, self.api, self.app, self.receiver = client, api, app, receiver

    async def setup(self, owner: Account) -> Team:
        self.owner = owner
        self.project = await self.api.project(owner, "Acme iOS")
        self.developer = await self.api.register("dev@example.com")
        self.tester = await self.api.register("tester@example.com")
        await self.api.add_member(owner, self.id, self.developer, "developer")
        await self.api.add_member(owner, self.id, self.tester, "tester")
        self.key = await self.put_key(self.receiver.trust(new_team_key()))
        return self

    @property
    def id(self) -> str:
        return str(self.project["id"])

    async def put_key(self, key: TeamKey) -> TeamKey:
        r = await self.client.put(
            f"/api/projects/{self.id}/apple-api-key", json=key.body(), headers=self.owner.headers
        )
        assert r.status_code == 200, r.text
        return key

    async def device(self, account: Account, **fields: Any) -> dict[str, str]:
        return await enrolled(self.app.state.ctx.sessions, account.user["id"], **fields)

    async def register(self, device_id: str, account: Account | None = None) -> httpx.Response:
        return await self.client.post(
            f"/api/projects/{self.id}/devices/{device_id}/register-with-apple",
            headers=(account or self.developer).headers,
        )

    async def register_all(self, account: Account | None = None) -> httpx.Response:
        return await self.client.post(
            f"/api/projects/{self.id}/devices/register-with-apple",
            headers=(account or self.developer).headers,
        )

    async def registered(self) -> dict[str, str | None]:
        """Device id -> Apple's id, as the project recorded them."""
        async with self.app.state.ctx.sessions() as db:
            rows = await db.execute(
                select(
                    AppleDeviceRegistration.device_id, AppleDeviceRegistration.apple_device_id
                ).where(AppleDeviceRegistration.project_id == self.id)
            )
            return {row[0]: row[1] for row in rows}


@pytest.fixture
async def team(
    client: httpx.AsyncClient, api: Api, app: FastAPI, receiver: AppleReceiver, owner: Account
) -> Team:
    return await Team(client, api, app, receiver).setup(owner)


# -- one device ------------------------------------------------------------------------------


async def test_a_developer_registers_a_testers_device_with_a_token_and_body_as_apple_documents(
    team: Team, receiver: AppleReceiver, clock: FrozenClock
) -> None:
    phone = await team.device(team.tester)

    r = await team.register(phone["id"])

    assert r.status_code == 200, r.text
    [sent] = receiver.received
    assert sent.problems == []
    assert sent.token_header == {"alg": "ES256", "kid": team.key.key_id, "typ": "JWT"}
    assert sent.claims is not None
    assert sent.claims["iss"] == team.key.issuer_id
    assert sent.claims["iat"] == int(clock.now().timestamp())
    assert sent.claims["exp"] - sent.claims["iat"] == 20 * 60
    assert sent.json == {
        "data": {
            "type": "devices",
            "attributes": {"name": "Erin's iPhone", "platform": "IOS", "udid": phone["udid"]},
        }
    }
    apple_id = receiver.devices[phone["udid"]]
    assert r.json() == {
        "deviceId": phone["id"],
        "udid": phone["udid"],
        "name": "Erin's iPhone",
        "platform": "IOS",
        "appleDeviceId": apple_id,
        "outcome": "created",
        "registeredWithApple": {
            "at": iso_z(clock.now()),
            "by": {"id": team.developer.user["id"], "email": team.developer.email},
        },
    }
    assert await team.registered() == {phone["id"]: apple_id}


async def test_a_long_name_is_cut_to_apples_fifty_characters_and_a_mac_is_mac_os(
    team: Team, receiver: AppleReceiver
) -> None:
    name = "Erin's\nMacBook Pro (work) \u202e of the QA team, third floor, by the window"
    mac = await team.device(team.tester, name=name, platform=DevicePlatform.MACOS)

    r = await team.register(mac["id"])

    assert r.status_code == 200, r.text
    sent = receiver.received[-1]
    assert sent.problems == []
    assert sent.attributes["platform"] == "MAC_OS"
    assert sent.attributes["name"] == r.json()["name"]
    assert len(sent.attributes["name"]) == 50
    assert sent.attributes["name"].startswith("Erin's MacBook Pro (work) of the QA team")
    assert r.json()["platform"] == "MAC_OS"


async def test_a_device_registered_through_the_project_is_answered_without_asking_apple(
    team: Team, receiver: AppleReceiver, clock: FrozenClock
) -> None:
    phone = await team.device(team.tester)
    first = await team.register(phone["id"])
    clock.advance(hours=1)

    r = await team.register(phone["id"], team.owner)

    assert r.status_code == 200, r.text
    assert len(receiver.received) == 1
    assert r.json() == first.json() | {"outcome": "unchanged"}


async def test_a_device_apple_already_has_counts_as_registered(
    team: Team, receiver: AppleReceiver
) -> None:
    phone = await team.device(team.tester)
    receiver.devices[phone["udid"]] = "ELSEWHERE1"  # registered by hand, or by another tool

    r = await team.register(phone["id"])

    assert r.status_code == 200, r.text
    assert receiver.received[-1].problems == []
    assert r.json()["outcome"] == "existing"
    assert r.json()["appleDeviceId"] is None
    assert await team.registered() == {phone["id"]: None}


async def test_only_a_members_device_can_be_registered(team: Team, api: Api) -> None:
    outsider = await api.register("outsider@example.com")
    theirs = await team.device(outsider)

    for device_id in (theirs["id"], "dev_01ANUNKNOWNDEVICE0000000000", "%00"):
        r = await team.register(device_id)
        assert_problem(r, 404)
    r = await team.register(theirs["id"])
    assert_problem(r, 404, "device_not_found")
    assert team.receiver.received == []


async def test_a_tester_can_neither_register_devices_nor_see_what_was_registered(
    team: Team, receiver: AppleReceiver
) -> None:
    phone = await team.device(team.tester)

    assert_problem(await team.register(phone["id"], team.tester), 403, "insufficient_role")
    assert_problem(await team.register_all(team.tester), 403, "insufficient_role")
    r = await team.client.get(
        f"/api/projects/{team.id}/devices/apple-registrations", headers=team.tester.headers
    )
    assert_problem(r, 403, "insufficient_role")
    assert receiver.received == []
    assert await team.registered() == {}


async def test_without_a_key_registering_is_a_409_and_apple_is_not_asked(
    team: Team, receiver: AppleReceiver
) -> None:
    phone = await team.device(team.tester)
    r = await team.client.delete(
        f"/api/projects/{team.id}/apple-api-key", headers=team.owner.headers
    )
    assert r.status_code == 204

    assert_problem(await team.register(phone["id"]), 409, "apple_key_missing")
    assert_problem(await team.register_all(), 409, "apple_key_missing")
    assert receiver.received == []


# -- Apple's refusals ------------------------------------------------------------------------

REFUSALS = [
    (
        "a key Apple does not know",
        Answer(401, apple_error(401, "NOT_AUTHORIZED", "Authentication credentials are missing "
               "or invalid.", "Provide a properly configured and signed bearer token.")),
        409, "apple_key_rejected",
    ),
    (
        "a key whose role may not",
        Answer(403, apple_error(403, "FORBIDDEN_ERROR", "This request is forbidden for security "
               "reasons", "The API key in use does not allow this request")),
        409, "apple_key_forbidden",
    ),
    ("the yearly device limit", Answer(403, LIMIT), 409, "apple_device_limit"),
    (
        "the yearly limit, told as a conflict",
        Answer(409, apple_error(409, "ENTITY_ERROR", "There is a problem with the request "
               "entity", "You have reached the maximum number of devices for this year.")),
        409, "apple_device_limit",
    ),
    (
        "an invalid UDID",
        Answer(409, apple_error(409, "ENTITY_ERROR.ATTRIBUTE.INVALID", "An attribute value is "
               "invalid.", "An invalid value 'X' was provided for the parameter 'udid'.")),
        422, "apple_device_refused",
    ),
    (
        "the hourly quota",
        Answer(429, apple_error(429, "RATE_LIMIT_EXCEEDED", "The request rate limit has been "
               "reached.", "We've received too many requests for this API.")),
        429, "apple_rate_limited",
    ),
    (
        "a server error",
        Answer(500, apple_error(500, "UNEXPECTED_ERROR", "An unexpected error occurred.",
                                "An unexpected error occurred on the server side.")),
        502, "apple_unavailable",
    ),
    ("an answer that is not JSON", Answer(503, b"<html>Service Unavailable</html>"), 502,
     "apple_unavailable"),
    ("a redirect", Answer(302, b"", {"location": "https://example.com/"}), 502,
     "apple_unavailable"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("what", "answer", "status", "code"), REFUSALS, ids=[r[0] for r in REFUSALS]
)
async def test_each_refusal_of_apples_is_a_clear_problem_and_nothing_is_recorded(
    team: Team, receiver: AppleReceiver, what: str, answer: Answer, status: int, code: str
) -> None:
    phone = await team.device(team.tester)
    receiver.answers.append(answer)

    r = await team.register(phone["id"])

    problem = assert_problem(r, status, code)
    assert receiver.received[-1].problems == []
    if answer.body and isinstance(answer.body, dict):
        assert answer.body["errors"][0]["detail"] in problem["detail"]  # Apple's words
    assert await team.registered() == {}


async def test_the_hourly_quota_says_when_to_try_again(team: Team, receiver: AppleReceiver) -> None:
    phone = await team.device(team.tester)
    receiver.answers += [Answer(429, b"{}", {"retry-after": "120"}), Answer(429, b"{}")]

    r = await team.register(phone["id"])
    assert_problem(r, 429, "apple_rate_limited")
    assert r.headers["retry-after"] == "120"
    r = await team.register(phone["id"])
    assert_problem(r, 429, "apple_rate_limited")
    assert r.headers["retry-after"] == "600"  # Apple's quota is hourly


async def test_apple_too_slow_is_a_502_within_the_timeout(
    team: Team, receiver: AppleReceiver, settings: Settings
) -> None:
    phone = await team.device(team.tester)
    settings.apple_api_timeout_seconds = 0.5
    release = threading.Event()
    receiver.answers.append(Answer(201, release=release))

    r = await team.register(phone["id"])
    release.set()

    problem = assert_problem(r, 502, "apple_unavailable")
    assert "0.5 seconds" in problem["detail"]
    assert await team.registered() == {}


async def test_apple_unreachable_is_a_502(team: Team, settings: Settings) -> None:
    phone = await team.device(team.tester)
    settings.apple_api_url = f"http://127.0.0.1:{free_port()}"  # nothing listens there

    r = await team.register(phone["id"])

    assert_problem(r, 502, "apple_unavailable")
    assert await team.registered() == {}


async def test_apples_words_reach_the_problem_on_one_line_and_cut_short(
    team: Team, receiver: AppleReceiver
) -> None:
    phone = await team.device(team.tester)
    detail = "Line one\r\nSet-Cookie: x=1\u202e" + "long " * 200
    receiver.answers.append(Answer(400, apple_error(400, "PARAMETER_ERROR", "Bad", detail)))

    r = await team.register(phone["id"])

    problem = assert_problem(r, 422, "apple_device_refused")
    assert "\n" not in problem["detail"]
    assert "\r" not in problem["detail"]
    assert "\u202e" not in problem["detail"]
    assert "Line one Set-Cookie: x=1 long" in problem["detail"]
    assert len(problem["detail"]) < 400


# -- every missing device --------------------------------------------------------------------


async def test_register_all_sends_only_the_members_devices_not_yet_registered_and_again_nothing(
    team: Team, receiver: AppleReceiver, api: Api
) -> None:
    testers = [await team.device(team.tester), await team.device(team.tester, name="iPad",
               platform=DevicePlatform.IPADOS)]  # fmt: skip
    own = await team.device(team.developer)
    done = await team.device(team.owner)
    assert (await team.register(done["id"])).status_code == 200
    outsider = await api.register("outsider@example.com")
    await team.device(outsider)
    before = len(receiver.received)

    r = await team.register_all()

    assert r.status_code == 200, r.text
    body = r.json()
    expected = sorted(d["id"] for d in [*testers, own])
    assert sorted(x["deviceId"] for x in body["registrations"]) == expected
    assert {x["outcome"] for x in body["registrations"]} == {"created"}
    assert body["refused"] == []
    assert body["remaining"] == 0
    sent = receiver.received[before:]
    assert [s.problems for s in sent] == [[], [], []]
    assert sorted(s.attributes["udid"] for s in sent) == sorted(d["udid"] for d in [*testers, own])
    assert [s.attributes["platform"] for s in sent].count("IOS") == 3  # an iPad is IOS
    assert set(await team.registered()) == {*expected, done["id"]}

    r = await team.register_all()

    assert r.status_code == 200, r.text
    assert r.json() == {"registrations": [], "refused": [], "remaining": 0, "lastSent": None}
    assert len(receiver.received) == before + 3


async def test_register_all_goes_on_past_a_device_apple_refuses(
    team: Team, receiver: AppleReceiver
) -> None:
    devices = [await team.device(team.tester) for _ in range(3)]
    receiver.answers += [
        Answer(201),
        Answer(409, apple_error(409, "ENTITY_ERROR.ATTRIBUTE.INVALID", "An attribute value is "
               "invalid.", "An invalid value was provided for the parameter 'udid'.")),
        Answer(201),
    ]  # fmt: skip

    r = await team.register_all()

    assert r.status_code == 200, r.text
    body = r.json()
    assert [x["deviceId"] for x in body["registrations"]] == [devices[0]["id"], devices[2]["id"]]
    [refused] = body["refused"]
    assert refused["deviceId"] == devices[1]["id"]
    assert refused["code"] == "apple_device_refused"
    assert "parameter 'udid'" in refused["detail"]
    assert body["remaining"] == 1


async def test_the_yearly_limit_ends_register_all_and_what_was_registered_before_stands(
    team: Team, receiver: AppleReceiver
) -> None:
    devices = [await team.device(team.tester) for _ in range(3)]
    receiver.answers += [Answer(201), Answer(403, LIMIT)]

    r = await team.register_all()

    problem = assert_problem(r, 409, "apple_device_limit")
    assert problem["registered"] == [devices[0]["id"]]
    assert problem["remaining"] == 2
    assert len(receiver.received) == 2  # the third was not sent
    assert list(await team.registered()) == [devices[0]["id"]]
    r = await team.client.get(
        f"/api/projects/{team.id}/devices/apple-registrations", headers=team.developer.headers
    )
    assert [x["deviceId"] for x in r.json()["registrations"]] == [devices[0]["id"]]


async def test_register_all_sends_twenty_at_a_time_and_says_how_many_remain(
    team: Team, receiver: AppleReceiver
) -> None:
    for _ in range(23):
        await team.device(team.tester)

    first = await team.register_all()
    second = await team.register_all()

    assert first.status_code == 200, first.text
    assert (len(first.json()["registrations"]), first.json()["remaining"]) == (20, 3)
    assert (len(second.json()["registrations"]), second.json()["remaining"]) == (3, 0)
    assert len(receiver.received) == 23
    assert all(s.problems == [] for s in receiver.received)
    assert len({s.attributes["udid"] for s in receiver.received}) == 23


async def test_register_all_stops_sending_after_thirty_seconds_and_says_how_many_remain(
    team: Team, receiver: AppleReceiver, clock: FrozenClock
) -> None:
    for _ in range(5):
        await team.device(team.tester)
    receiver.on_request = lambda: clock.advance(seconds=11)  # Apple takes 11 s each

    r = await team.register_all()

    assert r.status_code == 200, r.text
    assert len(receiver.received) == 3  # at 0, 11 and 22 s; not at 33
    assert (len(r.json()["registrations"]), r.json()["remaining"]) == (3, 2)


async def test_two_register_alls_at_once_each_answer_and_each_device_is_recorded_once(
    team: Team, receiver: AppleReceiver
) -> None:
    devices = [await team.device(team.tester) for _ in range(4)]

    answers = await asyncio.gather(team.register_all(), team.register_all(team.owner))

    assert [a.status_code for a in answers] == [200, 200], [a.text for a in answers]
    assert set(await team.registered()) == {d["id"] for d in devices}
    outcomes = [x["outcome"] for a in answers for x in a.json()["registrations"]]
    assert outcomes.count("created") == 4  # Apple registered each once


async def test_the_registrations_list_pages_by_device(
    team: Team, receiver: AppleReceiver, clock: FrozenClock
) -> None:
    devices = sorted([await team.device(team.tester) for _ in range(3)], key=lambda d: d["id"])
    assert (await team.register_all()).status_code == 200
    url = f"/api/projects/{team.id}/devices/apple-registrations"

    r = await team.client.get(f"{url}?limit=2", headers=team.developer.headers)

    assert r.status_code == 200, r.text
    page = r.json()
    assert [x["deviceId"] for x in page["registrations"]] == [d["id"] for d in devices[:2]]
    first = page["registrations"][0]
    assert first == {
        "deviceId": devices[0]["id"],
        "udid": devices[0]["udid"],
        "name": "Erin's iPhone",
        "platform": "ios",
        "testerId": team.tester.user["id"],
        "appleDeviceId": receiver.devices[devices[0]["udid"]],
        "registeredWithApple": {
            "at": iso_z(clock.now()),
            "by": {"id": team.developer.user["id"], "email": team.developer.email},
        },
    }
    r = await team.client.get(
        f"{url}?limit=2&cursor={page['nextCursor']}", headers=team.developer.headers
    )
    assert [x["deviceId"] for x in r.json()["registrations"]] == [devices[2]["id"]]
    assert r.json()["nextCursor"] is None


async def test_a_device_list_reads_which_devices_are_registered_in_one_statement(
    team: Team, app: FastAPI
) -> None:
    devices = [await team.device(team.tester) for _ in range(3)]
    for device in devices[:2]:
        assert (await team.register(device["id"])).status_code == 200
    reads = Reads.on(app.state.ctx.read_engine)
    try:
        found = await registrations_by_device(reads, team.id, [d["id"] for d in devices])
        assert await registrations_by_device(reads, team.id, []) == {}
    finally:
        await reads.close()

    assert set(found) == {devices[0]["id"], devices[1]["id"]}
    record = found[devices[0]["id"]]
    assert record.registered_by == team.developer.user["id"]
    assert record.apple_device_id == team.receiver.devices[devices[0]["udid"]]


@pytest.mark.parametrize(
    ("url", "taken"),
    [
        ("https://api.appstoreconnect.apple.com/", "https://api.appstoreconnect.apple.com"),
        ("http://127.0.0.1:8443", "http://127.0.0.1:8443"),
        ("http://api.appstoreconnect.apple.com", None),  # the token would travel in clear
        ("ftp://api.appstoreconnect.apple.com", None),
        ("api.appstoreconnect.apple.com", None),
    ],
)
def test_the_apple_url_is_https_or_this_machine(url: str, taken: str | None) -> None:
    if taken is None:
        with pytest.raises(ConfigurationError, match="BUILDBAY_APPLE_API_URL"):
            Settings(apple_api_url=url)
    else:
        assert Settings(apple_api_url=url).apple_api_url == taken

"""Webhooks end to end: the API, the outbox's worker, and a real receiver that verifies every
message with the `standardwebhooks` package."""

from __future__ import annotations

import asyncio
import base64
import email
import email.policy
import itertools
import time
from datetime import datetime, timedelta
from email.message import EmailMessage

import pytest
from sqlalchemy import func, select

from buildbay.clock import FrozenClock
from buildbay.config import Settings
from buildbay.db.engine import finish
from buildbay.jobs.models import Job
from buildbay.webhooks.delivery import RETRY_SCHEDULE, TIMEOUT_SECONDS, WebhookSender
from buildbay.webhooks.events import WEBHOOK_JOB, EventType, emit
from buildbay.webhooks.models import WebhookDelivery
from tests.conftest import Account, Api, assert_problem
from tests.webhooks.conftest import Hooks
from tests.webhooks.receiver import Answer, Receiver, receiving

pytestmark = pytest.mark.usefixtures("no_leaks")


def parse(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


async def test_a_new_webhook_shows_its_secret_once(
    hooks: Hooks, api: Api, owner: Account, receiver: Receiver
) -> None:
    project = await api.project(owner)
    created = await hooks.create(
        owner, project["id"], receiver.url, ["build.ready", "member.added"]
    )
    secret = created.pop("secret")
    assert secret.startswith("whsec_")
    assert len(base64.b64decode(secret.removeprefix("whsec_"))) >= 24
    assert created == {
        "id": created["id"],
        "url": receiver.url,
        "events": ["build.ready", "member.added"],
        "description": "CI",
        "format": "standard",  # the default: the signed event, as before formats
        "suggestedFormat": None,
        "enabled": True,
        "disabledReason": None,
        "createdAt": created["createdAt"],
        "failingSince": None,
        "lastDeliveryAt": None,
    }
    base = f"/api/projects/{project['id']}/webhooks"
    listed = (await hooks.client.get(base, headers=owner.headers)).json()
    assert listed == {"webhooks": [created]}
    one = await hooks.client.get(f"{base}/{created['id']}", headers=owner.headers)
    assert one.status_code == 200
    assert one.json() == created
    assert secret not in one.text


async def test_a_test_event_arrives_signed_as_standard_webhooks_says(
    hooks: Hooks, api: Api, owner: Account, receiver: Receiver
) -> None:
    project = await api.project(owner)
    webhook = await hooks.create(owner, project["id"], receiver.url, receiver=receiver)
    delivery_id = await hooks.test(owner, project["id"], webhook["id"])
    assert receiver.received == []  # nothing is sent before the worker runs
    assert await hooks.run() == 1

    [message] = receiver.received
    assert message.verified_by == [webhook["secret"]], message.error
    assert message.headers["content-type"] == "application/json"
    assert "Buildbay" in message.headers["user-agent"]
    assert message.headers["webhook-signature"].startswith("v1,")
    payload = message.payload
    assert payload["type"] == "webhook.test"
    assert payload["data"]["projectId"] == project["id"]
    assert payload["data"]["webhookId"] == webhook["id"]

    [delivery] = await hooks.deliveries(owner, project["id"], webhook["id"])
    assert delivery["id"] == delivery_id
    assert delivery["eventId"] == message.id
    assert delivery["eventType"] == "webhook.test"
    assert delivery["status"] == "delivered"
    assert delivery["attempts"] == 1
    assert delivery["lastStatusCode"] == 200
    assert delivery["lastError"] is None
    assert delivery["nextAttemptAt"] is None
    assert delivery["deliveredAt"] is not None
    r = await hooks.client.get(
        f"/api/projects/{project['id']}/webhooks/{webhook['id']}/deliveries/{delivery_id}",
        headers=owner.headers,
    )
    assert r.status_code == 200, r.text
    detail = r.json()
    assert detail["payload"] == payload
    assert detail["lastResponseBody"] == '{"ok":true}'
    assert [(a["statusCode"], a["error"]) for a in detail["history"]] == [(200, None)]
    listed = await hooks.client.get(
        f"/api/projects/{project['id']}/webhooks/{webhook['id']}", headers=owner.headers
    )
    assert listed.json()["lastDeliveryAt"] is not None


async def test_after_a_rotation_both_secrets_sign_for_a_day_then_only_the_new_one(
    hooks: Hooks, api: Api, owner: Account, receiver: Receiver, clock: FrozenClock
) -> None:
    project = await api.project(owner)
    webhook = await hooks.create(owner, project["id"], receiver.url, receiver=receiver)
    old = webhook["secret"]
    r = await hooks.client.post(
        f"/api/projects/{project['id']}/webhooks/{webhook['id']}/rotate-secret",
        headers=owner.headers,
    )
    assert r.status_code == 200, r.text
    new = r.json()["secret"]
    assert new.startswith("whsec_")
    assert new != old
    receiver.secrets.append(new)

    await hooks.test(owner, project["id"], webhook["id"])
    await hooks.run()
    assert receiver.received[-1].verified_by == [old, new]
    assert len(receiver.received[-1].headers["webhook-signature"].split(" ")) == 2

    clock.advance(hours=24, seconds=1)
    owner = await api.login(owner)  # the access token expired meanwhile
    await hooks.test(owner, project["id"], webhook["id"])
    await hooks.run()
    assert receiver.received[-1].verified_by == [new]
    assert len(receiver.received[-1].headers["webhook-signature"].split(" ")) == 1


async def test_a_500_is_retried_on_the_schedule_with_the_same_id_and_body(
    hooks: Hooks, api: Api, owner: Account, receiver: Receiver, clock: FrozenClock
) -> None:
    project = await api.project(owner)
    webhook = await hooks.create(owner, project["id"], receiver.url, receiver=receiver)
    receiver.answers = [Answer(500, body=b"down"), Answer(503)]
    await hooks.test(owner, project["id"], webhook["id"])
    start = clock.now()
    await hooks.run()
    [delivery] = await hooks.deliveries(owner, project["id"], webhook["id"])
    assert (delivery["status"], delivery["attempts"], delivery["lastStatusCode"]) == (
        "pending",
        1,
        500,
    )
    due = parse(delivery["nextAttemptAt"])
    assert start + RETRY_SCHEDULE[0] <= due <= start + RETRY_SCHEDULE[0] * 1.2 + timedelta(1e-6)
    assert await hooks.run() == 0  # not due yet
    hook = (
        await hooks.client.get(
            f"/api/projects/{project['id']}/webhooks/{webhook['id']}", headers=owner.headers
        )
    ).json()
    assert parse(hook["failingSince"]) == start

    clock.advance(seconds=6)
    await hooks.run()
    [delivery] = await hooks.deliveries(owner, project["id"], webhook["id"])
    assert (delivery["status"], delivery["attempts"]) == ("pending", 2)
    assert parse(delivery["nextAttemptAt"]) - clock.now() >= RETRY_SCHEDULE[1]

    clock.advance(minutes=6)
    await hooks.run()
    [delivery] = await hooks.deliveries(owner, project["id"], webhook["id"])
    assert (delivery["status"], delivery["attempts"]) == ("delivered", 3)
    assert len({m.id for m in receiver.received}) == 1
    assert len({m.body for m in receiver.received}) == 1
    assert all(m.verified_by for m in receiver.received)
    r = await hooks.client.get(
        f"/api/projects/{project['id']}/webhooks/{webhook['id']}/deliveries/{delivery['id']}",
        headers=owner.headers,
    )
    assert [a["statusCode"] for a in r.json()["history"]] == [500, 503, 200]
    hook = (
        await hooks.client.get(
            f"/api/projects/{project['id']}/webhooks/{webhook['id']}", headers=owner.headers
        )
    ).json()
    assert hook["failingSince"] is None


async def test_retries_go_on_for_more_than_three_days_each_wait_longer_then_give_up(
    hooks: Hooks, api: Api, owner: Account, receiver: Receiver, clock: FrozenClock
) -> None:
    project = await api.project(owner)
    webhook = await hooks.create(owner, project["id"], receiver.url, receiver=receiver)
    receiver.default = Answer(500)
    await hooks.test(owner, project["id"], webhook["id"])
    attempts_at = []
    while True:
        attempts_at.append(clock.now())
        assert await hooks.run() == 1
        [delivery] = await hooks.deliveries(owner, project["id"], webhook["id"])
        if delivery["status"] != "pending":
            break
        clock.advance(seconds=(parse(delivery["nextAttemptAt"]) - clock.now()).total_seconds())
        owner = await api.login(owner)
    assert delivery["status"] == "failed"
    assert delivery["attempts"] == len(RETRY_SCHEDULE) + 1 == len(receiver.received)
    assert attempts_at[-1] - attempts_at[0] >= timedelta(days=3)
    waits = [b - a for a, b in itertools.pairwise(attempts_at)]
    for wait, scheduled in zip(waits, RETRY_SCHEDULE, strict=True):
        assert scheduled <= wait <= scheduled * 1.2 + timedelta(seconds=1)
    assert len({m.id for m in receiver.received}) == 1


async def test_a_receiver_that_does_not_answer_in_time_is_a_failed_attempt(
    hooks: Hooks, api: Api, owner: Account, receiver: Receiver
) -> None:
    assert TIMEOUT_SECONDS == 10
    assert WebhookSender(allow_private=False).timeout == TIMEOUT_SECONDS
    hooks.ctx.webhook_sender.timeout = 0.5  # the same path, in a test's time
    project = await api.project(owner)
    webhook = await hooks.create(owner, project["id"], receiver.url, receiver=receiver)
    receiver.answers = [Answer(200, delay=1.5)]
    await hooks.test(owner, project["id"], webhook["id"])
    await hooks.run()
    [delivery] = await hooks.deliveries(owner, project["id"], webhook["id"])
    assert delivery["status"] == "pending"
    assert delivery["lastStatusCode"] is None
    assert delivery["lastError"] == "no answer within 0.5 s"
    assert delivery["lastDurationMs"] >= 450


async def test_410_gone_disables_the_endpoint_at_once(
    hooks: Hooks, api: Api, owner: Account, receiver: Receiver
) -> None:
    project = await api.project(owner)
    webhook = await hooks.create(owner, project["id"], receiver.url, receiver=receiver)
    base = f"/api/projects/{project['id']}/webhooks/{webhook['id']}"
    receiver.answers = [Answer(410)]
    await hooks.test(owner, project["id"], webhook["id"])
    await hooks.run()
    [delivery] = await hooks.deliveries(owner, project["id"], webhook["id"])
    assert (delivery["status"], delivery["lastStatusCode"]) == ("failed", 410)
    hook = (await hooks.client.get(base, headers=owner.headers)).json()
    assert hook["enabled"] is False
    assert "410" in hook["disabledReason"]
    assert_problem(
        await hooks.client.post(f"{base}/test", headers=owner.headers), 409, "webhook_disabled"
    )

    r = await hooks.client.put(base, json={"enabled": True}, headers=owner.headers)
    assert r.status_code == 200, r.text
    assert (r.json()["enabled"], r.json()["disabledReason"]) == (True, None)
    await hooks.test(owner, project["id"], webhook["id"])
    await hooks.run()
    assert len(receiver.received) == 2


async def test_a_disabled_endpoint_is_sent_nothing(
    hooks: Hooks, api: Api, owner: Account, receiver: Receiver
) -> None:
    project = await api.project(owner)
    webhook = await hooks.create(owner, project["id"], receiver.url, receiver=receiver)
    base = f"/api/projects/{project['id']}/webhooks/{webhook['id']}"
    await hooks.test(owner, project["id"], webhook["id"])  # pending when it is disabled
    r = await hooks.client.put(base, json={"enabled": False}, headers=owner.headers)
    assert r.status_code == 200, r.text
    ctx = hooks.ctx
    db = ctx.sessions()
    assert await emit(db, project["id"], EventType.BUILD_READY, {"x": 1}, ctx.clock.now()) == 0
    await finish(db, ok=True)
    await hooks.run()
    assert receiver.received == []
    [delivery] = await hooks.deliveries(owner, project["id"], webhook["id"])
    assert (delivery["status"], delivery["attempts"]) == ("failed", 0)
    assert delivery["lastError"] == "the endpoint is disabled"


async def test_failing_for_five_days_disables_the_endpoint_and_mails_the_admins(
    hooks: Hooks,
    api: Api,
    owner: Account,
    receiver: Receiver,
    clock: FrozenClock,
    settings: Settings,
) -> None:
    project = await api.project(owner)
    admin = await api.register("admin@example.com")
    tester = await api.register("tester@example.com")
    await api.add_member(owner, project["id"], admin, "admin")
    await api.add_member(owner, project["id"], tester, "tester")
    webhook = await hooks.create(owner, project["id"], receiver.url, receiver=receiver)
    receiver.default = Answer(500)
    start = clock.now()
    for day in range(6):
        clock.advance(seconds=(start + timedelta(days=day) - clock.now()).total_seconds())
        owner = await api.login(owner)
        await hooks.test(owner, project["id"], webhook["id"])
        await hooks.run()
        hook = (
            await hooks.client.get(
                f"/api/projects/{project['id']}/webhooks/{webhook['id']}", headers=owner.headers
            )
        ).json()
        assert hook["enabled"] is (day < 5), day
    assert parse(hook["failingSince"]) == start
    assert hook["disabledReason"] == "every delivery failed for 5 days"
    mails = sorted(p.read_text() for p in settings.mail_dir.glob("*.eml"))
    mails = [m for m in mails if "Subject: Confirm your e-mail address" not in m]  # sign-ups
    assert len(mails) == 2
    assert any("admin@example.com" in m for m in mails)
    assert any("owner@example.com" in m for m in mails)
    assert all("tester@example.com" not in m for m in mails)
    assert all("A webhook of Acme was disabled" in m for m in mails)
    # Each carries the webhook's page, where it is enabled and its deliveries sent again.
    page = f"http://testserver/projects/{project['id']}/webhooks/{webhook['id']}"
    for raw in mails:
        message = email.message_from_string(raw, policy=email.policy.default)
        assert isinstance(message, EmailMessage)
        plain, html = message.get_body(("plain",)), message.get_body(("html",))
        assert plain is not None
        assert html is not None
        assert f"\n{page}\n" in plain.get_content()
        assert f'href="{page}"' in html.get_content()


async def test_a_delivery_is_sent_again_from_the_log_with_the_same_id(
    hooks: Hooks, api: Api, owner: Account, receiver: Receiver
) -> None:
    project = await api.project(owner)
    webhook = await hooks.create(owner, project["id"], receiver.url, receiver=receiver)
    delivery_id = await hooks.test(owner, project["id"], webhook["id"])
    await hooks.run()
    r = await hooks.client.post(
        f"/api/projects/{project['id']}/webhooks/{webhook['id']}/deliveries/{delivery_id}/retry",
        headers=owner.headers,
    )
    assert r.status_code == 202, r.text
    await hooks.run()
    first, again = receiver.received
    assert again.id == first.id
    assert again.body == first.body
    assert again.verified_by == [webhook["secret"]]
    [delivery] = await hooks.deliveries(owner, project["id"], webhook["id"])
    assert (delivery["status"], delivery["attempts"]) == ("delivered", 2)


async def test_a_delivery_named_alone_is_sent_again_only_within_its_project(
    hooks: Hooks, api: Api, owner: Account, receiver: Receiver
) -> None:
    project = await api.project(owner)
    other = await api.project(owner, "Other")
    webhook = await hooks.create(owner, project["id"], receiver.url, receiver=receiver)
    delivery_id = await hooks.test(owner, project["id"], webhook["id"])
    await hooks.run()

    elsewhere = await hooks.client.post(
        f"/api/projects/{other['id']}/webhook-deliveries/{delivery_id}/retry",
        headers=owner.headers,
    )
    r = await hooks.client.post(
        f"/api/projects/{project['id']}/webhook-deliveries/{delivery_id}/retry",
        headers=owner.headers,
    )

    assert_problem(elsewhere, 404, "delivery_not_found")
    assert r.status_code == 202, r.text
    assert r.json() == {"deliveryId": delivery_id}
    await hooks.run()
    first, again = receiver.received
    assert (again.id, again.body) == (first.id, first.body)
    [delivery] = await hooks.deliveries(owner, project["id"], webhook["id"])
    assert (delivery["status"], delivery["attempts"]) == ("delivered", 2)
    disabled = await hooks.client.put(
        f"/api/projects/{project['id']}/webhooks/{webhook['id']}",
        json={"enabled": False},
        headers=owner.headers,
    )
    assert disabled.status_code == 200, disabled.text
    r = await hooks.client.post(
        f"/api/projects/{project['id']}/webhook-deliveries/{delivery_id}/retry",
        headers=owner.headers,
    )
    assert_problem(r, 409, "webhook_disabled")


async def test_a_retry_from_the_log_replaces_the_scheduled_attempt(
    hooks: Hooks, api: Api, owner: Account, receiver: Receiver, clock: FrozenClock
) -> None:
    project = await api.project(owner)
    webhook = await hooks.create(owner, project["id"], receiver.url, receiver=receiver)
    receiver.answers = [Answer(500)]
    delivery_id = await hooks.test(owner, project["id"], webhook["id"])
    await hooks.run()
    r = await hooks.client.post(
        f"/api/projects/{project['id']}/webhooks/{webhook['id']}/deliveries/{delivery_id}/retry",
        headers=owner.headers,
    )
    assert r.status_code == 202, r.text
    await hooks.run()
    clock.advance(minutes=10)  # past when the automatic attempt was due
    await hooks.run()
    assert len(receiver.received) == 2  # the first attempt and the retry, not a third
    [delivery] = await hooks.deliveries(owner, project["id"], webhook["id"])
    assert (delivery["status"], delivery["attempts"]) == ("delivered", 2)


async def test_a_change_that_rolls_back_sends_nothing(
    hooks: Hooks, api: Api, owner: Account, receiver: Receiver
) -> None:
    project = await api.project(owner)
    webhook = await hooks.create(owner, project["id"], receiver.url, receiver=receiver)
    ctx = hooks.ctx
    db = ctx.sessions()
    assert await emit(db, project["id"], EventType.BUILD_READY, {"x": 1}, ctx.clock.now()) == 1
    await finish(db, ok=False)
    await hooks.run()
    assert receiver.received == []
    assert await hooks.deliveries(owner, project["id"], webhook["id"]) == []
    db = ctx.sessions()
    try:
        assert await db.scalar(select(func.count()).select_from(WebhookDelivery)) == 0
        assert await db.scalar(select(func.count()).where(Job.kind == WEBHOOK_JOB)) == 0
    finally:
        await finish(db, ok=True)


async def test_only_subscribed_events_are_sent_one_event_one_id_for_all_endpoints(
    hooks: Hooks, api: Api, owner: Account
) -> None:
    project = await api.project(owner)
    with receiving() as a, receiving() as b, receiving() as c:
        await hooks.create(owner, project["id"], a.url, ["build.ready"], receiver=a)
        await hooks.create(owner, project["id"], b.url, ["build.ready", "member.added"], b)
        await hooks.create(owner, project["id"], c.url, ["member.added"], receiver=c)
        ctx = hooks.ctx
        db = ctx.sessions()
        assert await emit(db, project["id"], EventType.BUILD_READY, {"x": 1}, ctx.clock.now()) == 2
        await finish(db, ok=True)
        await hooks.run()
        assert [len(a.received), len(b.received), len(c.received)] == [1, 1, 0]
        assert a.received[0].id == b.received[0].id
        assert a.received[0].payload == {
            "type": "build.ready",
            "timestamp": ctx.clock.now().strftime("%Y-%m-%dT%H:%M:%SZ"),
            "data": {"x": 1, "projectId": project["id"]},
        }


async def test_deliveries_are_listed_newest_first_by_page(
    hooks: Hooks, api: Api, owner: Account, receiver: Receiver
) -> None:
    project = await api.project(owner)
    webhook = await hooks.create(owner, project["id"], receiver.url, receiver=receiver)
    ids = [await hooks.test(owner, project["id"], webhook["id"]) for _ in range(3)]
    base = f"/api/projects/{project['id']}/webhooks/{webhook['id']}/deliveries"
    r = await hooks.client.get(f"{base}?limit=2", headers=owner.headers)
    page = r.json()
    assert [d["id"] for d in page["deliveries"]] == ids[::-1][:2]
    r = await hooks.client.get(f"{base}?limit=2&cursor={page['nextCursor']}", headers=owner.headers)
    assert [d["id"] for d in r.json()["deliveries"]] == ids[:1]
    assert r.json()["nextCursor"] is None


async def test_unknown_webhooks_and_deliveries_are_404(
    hooks: Hooks, api: Api, owner: Account, receiver: Receiver
) -> None:
    project = await api.project(owner)
    other = await api.project(owner, "Other")
    webhook = await hooks.create(owner, project["id"], receiver.url)
    elsewhere = f"/api/projects/{other['id']}/webhooks/{webhook['id']}"
    for method in ("GET", "DELETE"):
        r = await hooks.client.request(method, elsewhere, headers=owner.headers)
        assert_problem(r, 404, "webhook_not_found")
    base = f"/api/projects/{project['id']}/webhooks/{webhook['id']}"
    r = await hooks.client.get(
        f"{base}/deliveries/whd_01JD0000000000000000000000", headers=owner.headers
    )
    assert_problem(r, 404, "delivery_not_found")
    r = await hooks.client.post(
        f"{base}/deliveries/whd_01JD0000000000000000000000/retry", headers=owner.headers
    )
    assert_problem(r, 404, "delivery_not_found")
    r = await hooks.client.delete(base, headers=owner.headers)
    assert r.status_code == 204
    assert_problem(await hooks.client.get(base, headers=owner.headers), 404, "webhook_not_found")


@pytest.mark.parametrize(
    "events",
    [[], ["build.exploded"], ["webhook.test"]],
)
async def test_events_must_be_known_subscribable_types(
    hooks: Hooks, api: Api, owner: Account, events: list[str]
) -> None:
    project = await api.project(owner)
    r = await hooks.client.post(
        f"/api/projects/{project['id']}/webhooks",
        json={"url": "https://hooks.example.com/x", "events": events},
        headers=owner.headers,
    )
    assert_problem(r, 422)


async def test_a_slow_receiver_holds_up_neither_the_api_nor_other_endpoints(
    hooks: Hooks, api: Api, owner: Account, receiver: Receiver
) -> None:
    # The worker's own loop, as `serve` runs it, not a round the test drives.
    project = await api.project(owner)
    slow = 10.0  # each of the slow receiver's answers: a wait behind it shows as this, or more
    receiver.default = Answer(200, delay=slow)
    with receiving() as fast:
        await hooks.create(owner, project["id"], receiver.url, ["member.added"], receiver)
        await hooks.create(owner, project["id"], fast.url, ["member.added"], receiver=fast)
        jobs = hooks.ctx.jobs
        assert jobs is not None
        jobs.start()
        try:
            started = time.monotonic()
            for n in range(3):
                carol = await api.register(f"carol{n}@example.com")
                await api.add_member(owner, project["id"], carol, "tester")
            # Three changes, each with a delivery to the slow receiver: had the API waited for
            # them, they would take three of its answers.
            assert time.monotonic() - started < slow
            # Had the fast endpoint's deliveries queued behind the slow one's, its third
            # would come two of the slow one's answers after the first change.
            async with asyncio.timeout(started + slow - time.monotonic()):
                while len(fast.received) < 3:  # noqa: ASYNC110 (another thread's list)
                    await asyncio.sleep(0.02)
        finally:
            await jobs.stop(grace=0.1)
        assert all(m.verified_by for m in fast.received)


async def test_a_slow_receivers_backlog_leaves_the_worker_free_for_other_endpoints(
    hooks: Hooks, api: Api, owner: Account, receiver: Receiver
) -> None:
    """More deliveries to a slow receiver than the worker has places: they take a few places
    (their endpoint's lane), not all, so another endpoint's deliveries written after them go
    out at once."""
    project = await api.project(owner)
    slow = 6.0
    receiver.default = Answer(200, delay=slow)
    jobs = hooks.ctx.jobs
    assert jobs is not None
    with receiving() as fast:
        behind = await hooks.create(owner, project["id"], receiver.url, receiver=receiver)
        ahead = await hooks.create(owner, project["id"], fast.url, receiver=fast)
        for _ in range(2 * jobs.batch):
            await hooks.test(owner, project["id"], behind["id"])
        sent = [await hooks.test(owner, project["id"], ahead["id"]) for _ in range(3)]
        jobs.start()
        try:
            started = time.monotonic()
            # Behind the slow endpoint's backlog, the first would wait for two of its answers.
            async with asyncio.timeout(slow / 2):
                while len(fast.received) < len(sent):  # noqa: ASYNC110 (another thread's list)
                    await asyncio.sleep(0.02)
            assert time.monotonic() - started < slow / 2
            assert len(receiver.received) < jobs.batch, "the slow endpoint took every place"
        finally:
            await jobs.stop(grace=0.1)
    assert all(m.verified_by == [ahead["secret"]] for m in fast.received)


async def test_a_receiver_down_for_an_hour_gets_everything_once_it_is_back(
    hooks: Hooks, api: Api, owner: Account, clock: FrozenClock
) -> None:
    project = await api.project(owner)
    with receiving() as receiver:
        webhook = await hooks.create(owner, project["id"], receiver.url, receiver=receiver)
    port = int(receiver.url.split(":")[2].split("/")[0])
    sent = [await hooks.test(owner, project["id"], webhook["id"]) for _ in range(5)]
    start = clock.now()
    while clock.now() - start < timedelta(hours=1):  # nobody listens: refused, retried
        await hooks.run()
        clock.advance(minutes=1)
    owner = await api.login(owner)
    deliveries = await hooks.deliveries(owner, project["id"], webhook["id"])
    assert {d["status"] for d in deliveries} == {"pending"}
    assert all(d["attempts"] >= 4 and d["lastStatusCode"] is None for d in deliveries)
    assert all(d["lastError"] for d in deliveries), deliveries[0]

    with receiving(port=port, receiver=receiver):
        while {d["status"] for d in deliveries} != {"delivered"}:
            assert clock.now() - start < timedelta(hours=4)
            clock.advance(minutes=5)
            await hooks.run()
            owner = await api.login(owner)
            deliveries = await hooks.deliveries(owner, project["id"], webhook["id"])
    assert sorted(d["id"] for d in deliveries) == sorted(sent)
    ids = [m.id for m in receiver.received]
    assert len(ids) == len(set(ids)) == len(sent)  # each once, once it was back
    assert all(m.verified_by == [webhook["secret"]] for m in receiver.received)

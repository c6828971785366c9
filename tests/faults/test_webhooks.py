"""Webhooks through a real `buildbay serve` killed with SIGKILL between the commit of the
changes and their delivery: after a restart every event arrives, with the webhook-id it was
given at the commit, verified by the `standardwebhooks` package.

The kill lands while the receiver holds the first message unanswered (the attempt is on the
wire, its outcome not recorded) and the others wait behind it: the held one is sent again
after its job's lease, the others for the first time."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections import Counter
from collections.abc import Callable, Iterator

import httpx
import pytest
from sqlalchemy import func, select

from buildbay.db.engine import create_engine
from buildbay.webhooks.models import WebhookDelivery
from tests.faults.conftest import DATABASE_POLL, Server, wait_for
from tests.webhooks.receiver import Answer, Receiver, receiving

pytestmark = [pytest.mark.slow, pytest.mark.faults]

POLL_SECONDS = 30.0
FAST_JOBS = {
    "BUILDBAY_JOB_POLL_SECONDS": str(POLL_SECONDS),
    "BUILDBAY_JOB_RETRY_BASE_SECONDS": "0.5",
    "BUILDBAY_JOB_LEASE_SECONDS": "4",
    "BUILDBAY_WEBHOOK_ALLOW_HTTP": "true",
    "BUILDBAY_WEBHOOK_ALLOW_PRIVATE": "true",
}


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with receiving() as r:
        yield r


def delivery_statuses(database_url: str) -> Counter[str]:
    async def read() -> Counter[str]:
        engine = create_engine(database_url)
        try:
            async with engine.connect() as connection:
                rows = await connection.execute(
                    select(WebhookDelivery.status, func.count()).group_by(WebhookDelivery.status)
                )
                return Counter({str(status): int(count) for status, count in rows.all()})
        finally:
            await engine.dispose()

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, read()).result()


def test_events_committed_before_a_kill_are_delivered_after_the_restart_with_their_ids(
    server_env: dict[str, str],
    servers: Callable[..., Server],
    receiver: Receiver,
    database_url: str,
) -> None:
    server = servers(server_env | FAST_JOBS).start()
    http = httpx.Client(base_url=server.base, timeout=30)
    r = http.post("/api/auth/register", json={"email": "olive@example.com",
                                              "password": "a long password"})  # fmt: skip
    assert r.status_code == 201, r.text
    headers = {"Authorization": f"Bearer {r.json()['access_token']}"}
    project = http.post("/api/projects", json={"name": "Acme"}, headers=headers).json()
    r = http.post(
        f"/api/projects/{project['id']}/webhooks",
        json={"url": receiver.url, "events": ["member.added"]},
        headers=headers,
    )
    assert r.status_code == 201, r.text
    receiver.secrets.append(r.json()["secret"])

    # The first message is held unanswered; the kill lands while it is.
    receiver.answers = [Answer(200, delay=60.0)]
    people = [f"tester{n}@example.com" for n in range(5)]
    for email in people:
        r = http.post("/api/auth/register", json={"email": email, "password": "a long password"})
        assert r.status_code == 201, r.text
        r = http.post(
            f"/api/projects/{project['id']}/members",
            json={"email": email, "role": "tester"},
            headers=headers,
        )
        assert r.status_code == 201, r.text  # committed: its delivery is in the outbox
    wait_for(lambda: len(receiver.received) >= 1, "the first message on the wire")
    held = receiver.received[0].id  # the one left unanswered (others may have been answered)
    server.kill()
    http.close()
    assert delivery_statuses(database_url)["delivered"] < len(people)
    before = {m.id for m in receiver.received}

    server.start()
    wait_for(
        lambda: delivery_statuses(database_url) == Counter({"delivered": len(people)}),
        "every delivery recorded as delivered",
        interval=DATABASE_POLL,
    )
    ids = Counter(m.id for m in receiver.received)
    assert len(ids) == len(people)  # one webhook-id per event, none lost
    assert before <= set(ids)  # what was on the wire came again with its id
    assert all(m.verified_by for m in receiver.received)
    emails = {m.payload["data"]["email"] for m in receiver.received}
    assert emails == set(people)
    assert ids[held] == 2  # sent again after the kill, the same webhook-id

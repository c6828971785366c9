"""Mail through a real `buildbay serve` and a real SMTP server (aiosmtpd), under faults: the
SMTP server down for a while, then back; the server killed (SIGKILL) while a batch of mails is
being sent. Every mail arrives, and exactly once.

"Once" is what the SMTP server accepted: a `250` to the message's data. The worker records a
job as done right after that answer; a kill that lands between the two sends the mail again
after the job's lease (docs/operations.md, "Mail and background jobs"). That window is
milliseconds wide and a test cannot aim a kill into it; this one aims the kill where a batch
is mid-send, with messages on the wire that the SMTP server has not answered: those, and the
jobs not yet started, must arrive once after the restart; the ones answered before must not
come again."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections import Counter
from collections.abc import Callable, Iterator

import httpx
import pytest
from sqlalchemy import select

from buildbay.db.engine import create_engine
from buildbay.jobs.models import Job
from tests.faults.conftest import DATABASE_POLL, Server, wait_for
from tests.smtp import SIGN_UP_SUBJECT, SmtpSink, smtp

__all__ = ["smtp"]
pytestmark = [pytest.mark.slow, pytest.mark.faults]

POLL_SECONDS = 30.0
FAST_JOBS = {
    # A long poll: what these tests see must come from the wake-up after a commit and from
    # the worker's own reckoning of when the next job is due (a retry, a lease's end).
    "BUILDBAY_JOB_POLL_SECONDS": str(POLL_SECONDS),
    "BUILDBAY_JOB_RETRY_BASE_SECONDS": "0.5",
    "BUILDBAY_JOB_LEASE_SECONDS": "4",
    # These tests invite a batch from one new (unverified) account: what they prove is the
    # outbox's, not the invitation caps' (tests/invitations), which are off here.
    "BUILDBAY_INVITATIONS_PER_ACCOUNT_PER_DAY_UNVERIFIED": "0",
}


def job_statuses(database_url: str) -> Counter[str]:
    """How many mail jobs are in each status, read from the server's database (but the
    verification mails of the sign-ups, as SmtpSink.messages leaves them out)."""
    sign_up = f"Subject: {SIGN_UP_SUBJECT}"

    async def read() -> Counter[str]:
        engine = create_engine(database_url)
        try:
            async with engine.connect() as connection:
                rows = await connection.execute(
                    select(Job.status, Job.payload).where(Job.kind == "mail")
                )
                return Counter(
                    str(status) for status, payload in rows.all()
                    if sign_up not in payload["message"]
                )  # fmt: skip
        finally:
            await engine.dispose()

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, read()).result()


class Owner:
    """A user with a project on the server, who invites people (one mail each)."""

    def __init__(self, http: httpx.Client) -> None:
        self.http = http  # one client for every request (a client each costs an SSL context)
        r = http.post("/api/auth/register", json={"email": "olive@example.com",
                                                  "password": "a long password"})  # fmt: skip
        assert r.status_code == 201, r.text
        self.headers = {"Authorization": f"Bearer {r.json()['access_token']}"}
        r = http.post("/api/projects", json={"name": "Acme"}, headers=self.headers)
        assert r.status_code == 201, r.text
        self.project_id = r.json()["id"]

    def invite(self, email: str) -> None:
        r = self.http.post(
            f"/api/projects/{self.project_id}/invitations",
            json={"email": email, "role": "tester"},
            headers=self.headers,
        )
        assert r.status_code == 201, r.text


@pytest.fixture
def http() -> Iterator[httpx.Client]:
    """The test's client, given the server's address once it has one."""
    with httpx.Client(timeout=30) as client:
        yield client


def assert_each_once(smtp: SmtpSink, recipients: list[str]) -> None:
    received = smtp.messages()
    counts = Counter(r for m in received for r in m.recipients)
    assert counts == Counter(recipients), f"lost or doubled: {counts}"
    ids = Counter(m.message_id for m in received)
    assert all(n == 1 for n in ids.values()), ids


def test_mails_written_while_smtp_is_down_all_arrive_once_it_is_back(
    server_env: dict[str, str],
    servers: Callable[..., Server],
    smtp: SmtpSink,
    database_url: str,
    http: httpx.Client,
) -> None:
    server = servers(server_env | FAST_JOBS | {"BUILDBAY_SMTP_URL": smtp.url}).start()
    http.base_url = httpx.URL(server.base)
    owner = Owner(http)
    # The sign-up's verification mail out of the way first: a failure of it would say "cannot
    # reach" while the invitations' mails may not all have been tried yet.
    wait_for(lambda: len(smtp.messages(sign_ups=True)) == 1, "the sign-up's mail")
    smtp.stop()
    recipients = [f"tester{n}@example.com" for n in range(8)]
    for email in recipients:
        owner.invite(email)

    # Every mail has been tried and failed at least once, and waits for its retry.
    wait_for(lambda: "cannot reach the SMTP server" in server.log(), "failed attempts")
    assert job_statuses(database_url) == Counter({"pending": len(recipients)})
    smtp.start()

    smtp.wait_for(len(recipients), timeout=POLL_SECONDS)
    wait_for(lambda: job_statuses(database_url) == Counter({"done": len(recipients)}),
             "every job recorded as done", interval=DATABASE_POLL)  # fmt: skip
    assert_each_once(smtp, recipients)


def test_a_server_killed_in_the_middle_of_a_batch_loses_no_mail_and_sends_none_twice(
    server_env: dict[str, str],
    servers: Callable[..., Server],
    smtp: SmtpSink,
    database_url: str,
    http: httpx.Client,
) -> None:
    server = servers(server_env | FAST_JOBS | {"BUILDBAY_SMTP_URL": smtp.url}).start()
    http.base_url = httpx.URL(server.base)
    owner = Owner(http)
    before = [f"early{n}@example.com" for n in range(3)]
    for n, email in enumerate(before, start=1):
        owner.invite(email)
        # Woken by the commit, not found by a poll.
        smtp.wait_for(n, timeout=POLL_SECONDS / 3)
    wait_for(
        lambda: job_statuses(database_url)["done"] == len(before),
        "the first mails done",
        interval=DATABASE_POLL,
    )

    # From now on the SMTP server holds each message before answering it: the next batch is
    # caught on the wire, unanswered, when the kill lands.
    smtp.hold()
    batch = [f"batch{n}@example.com" for n in range(12)]
    for email in batch:
        owner.invite(email)
    wait_for(lambda: smtp.held > 0, "a message of the batch on the wire")
    server.kill()
    smtp.release()  # what it held has lost its client: never answered, never accepted
    assert job_statuses(database_url)["done"] == len(before)

    server.start()
    smtp.wait_for(len(before) + len(batch), timeout=POLL_SECONDS)
    everyone = before + batch
    wait_for(lambda: job_statuses(database_url) == Counter({"done": len(everyone)}),
             "every job recorded as done", interval=DATABASE_POLL)  # fmt: skip
    assert_each_once(smtp, everyone)
    assert "outlived its lease" not in server.log()

"""Delivering: the outbox job of a delivery makes one attempt, records it, and either ends the
delivery or schedules its next attempt (a new job; see events.schedule).

- Any 2xx delivers. `410 Gone` disables the endpoint at once. Anything else (another status, a
  timeout, a refused connection, a refused address) is retried on RETRY_SCHEDULE, each wait
  stretched by up to a fifth at random (jitter) so endpoints that failed together do not come
  back together: about three days and three hours of attempts in all.
- An endpoint that has failed every attempt for DISABLE_AFTER (5 days) is disabled, and the
  project's admins are mailed (through the outbox, like every mail).
- A delivery whose endpoint is disabled meanwhile fails without being sent.

The endpoint's row is read, and the request made, outside the job's unit of work: no database
connection waits on a receiver. What the attempt changes is written in the job's unit of work,
which commits with the job's completion (jobs/worker.py).
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import httpcore
import httpx
from sqlalchemy import bindparam, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay import __version__
from buildbay.auth.models import User
from buildbay.clock import Clock
from buildbay.console_urls import webhook_url
from buildbay.db.reads import Reads
from buildbay.ids import new_id
from buildbay.jobs.worker import Handler, JobRun
from buildbay.mail.headers import UnmailableAddress
from buildbay.mail.message import render
from buildbay.mail.outbox import MailOutbox
from buildbay.projects.enums import ProjectRole
from buildbay.projects.models import Project, ProjectMember
from buildbay.webhooks.enums import DeliveryStatus, WebhookFormat
from buildbay.webhooks.events import schedule
from buildbay.webhooks.models import Webhook, WebhookAttempt, WebhookDelivery
from buildbay.webhooks.reads import WEBHOOK, WebhookRecord
from buildbay.webhooks.signing import signature_header
from buildbay.webhooks.transport import (
    NOT_PUBLIC,
    AddressRefused,
    GuardedTransport,
    UrlRefused,
    endpoint_url,
)

log = logging.getLogger("buildbay.webhooks")

# The waits after each failed attempt: the Standard Webhooks spec's schedule (5 s, 5 min,
# 30 min, 2 h, 5 h, 10 h, 10 h), then 12 h more four times, so attempts go on past 3 days.
RETRY_SCHEDULE = (
    timedelta(seconds=5),
    timedelta(minutes=5),
    timedelta(minutes=30),
    timedelta(hours=2),
    timedelta(hours=5),
    timedelta(hours=10),
    timedelta(hours=10),
    timedelta(hours=12),
    timedelta(hours=12),
    timedelta(hours=12),
    timedelta(hours=12),
)
JITTER = 0.2  # each wait is stretched by up to this much of itself
DISABLE_AFTER = timedelta(days=5)
TIMEOUT_SECONDS = 10.0
RESPONSE_KEPT = 1024  # bytes of a response body kept for the delivery log
ERROR_LENGTH = 500
USER_AGENT = f"Buildbay-Webhooks/{__version__} (+https://www.standardwebhooks.com)"


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one attempt got: a status (and the start of the body), or an error."""

    status_code: int | None
    error: str | None
    duration_ms: int
    body: str | None

    @property
    def delivered(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300


class WebhookSender:
    """Sends signed requests through the SSRF guard (transport.py): one client per process,
    made on first use (in the loop that uses it), closed by the app's lifespan.

    Every attempt ends in an Outcome, whatever stopped it: a URL the rules refuse, a name
    that does not resolve, a refused address, a failed TLS handshake are failed attempts like
    an error status, logged and counted toward disabling the endpoint."""

    def __init__(
        self,
        *,
        allow_private: bool,
        allow_http: bool = False,
        timeout: float = TIMEOUT_SECONDS,
        wall: Callable[[], float] = time.time,
        network: httpcore.AsyncNetworkBackend | None = None,
    ) -> None:
        self.allow_private = allow_private
        self.allow_http = allow_http
        self.network = network  # connects to the addresses the guard lets through
        self.timeout = timeout
        # The signature's timestamp is the wall clock's: receivers compare it with theirs.
        self.wall = wall
        self._client: httpx.AsyncClient | None = None

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(
                transport=GuardedTransport(allow_private=self.allow_private, network=self.network),
                timeout=httpx.Timeout(self.timeout),
                follow_redirects=False,
                trust_env=False,
            )
        return self._client

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    async def send(self, url: str, secrets: list[str], message_id: str, body: str) -> Outcome:
        """Sends `body` to `url`, signed with `secrets`; with none, unsigned (a chat format's
        message: its receiver verifies nothing, and gets no `webhook-*` headers)."""
        headers = {"content-type": "application/json", "user-agent": USER_AGENT}
        if secrets:
            timestamp = int(self.wall())
            headers |= {
                "webhook-id": message_id,
                "webhook-timestamp": str(timestamp),
                "webhook-signature": signature_header(secrets, message_id, timestamp, body),
            }
        started = time.perf_counter()
        status: int | None = None
        kept = bytearray()
        error: str | None = None
        try:
            # The URL as the check at saving reads it, checked again (the rules or the
            # settings may have changed since), and sent to as read.
            target = endpoint_url(url, allow_http=self.allow_http, allow_private=self.allow_private)
        except AddressRefused:
            return Outcome(None, NOT_PUBLIC, 0, None)
        except UrlRefused as refused:
            return Outcome(None, f"refused: the URL {refused}"[:ERROR_LENGTH], 0, None)
        try:
            async with asyncio.timeout(self.timeout):
                request = self._http().build_request(
                    "POST", target, headers=headers, content=body.encode()
                )
                response = await self._http().send(request, stream=True)
                try:
                    status = response.status_code
                    async for chunk in response.aiter_raw():
                        kept += chunk[: RESPONSE_KEPT - len(kept)]
                        if len(kept) >= RESPONSE_KEPT:
                            break
                finally:
                    await response.aclose()
        except TimeoutError:
            error = f"no answer within {self.timeout:g} s"
        except httpx.TimeoutException:
            error = f"no answer within {self.timeout:g} s"
        except httpx.HTTPError as exc:
            error = str(exc) or type(exc).__name__
        except OSError as exc:
            error = str(exc) or type(exc).__name__
        except Exception as exc:  # whatever it was, the attempt failed: it is logged
            # Not the message: it may hold the URL, whose path is often a secret.
            log.error("a webhook attempt failed before an answer: %s", type(exc).__name__)
            error = f"the request could not be made ({type(exc).__name__})"
        duration = int((time.perf_counter() - started) * 1000)
        if status is not None and error is not None:
            # The status came, then the body did not: the status is the answer.
            error = None
        text = kept.decode("utf-8", errors="replace") if status is not None else None
        return Outcome(status, error and error[:ERROR_LENGTH], duration, text)


def webhook_handler(
    sessions_read: Callable[[], Reads],
    sender: WebhookSender,
    clock: Clock,
    mail: MailOutbox,
    public_url: str,
) -> Handler:
    """The outbox's handler of WEBHOOK_JOB jobs (`public_url`: the console's, for the mail
    that says an endpoint was disabled)."""

    async def deliver(run: JobRun) -> None:
        delivery_id = str(run.payload["deliveryId"])
        reads = sessions_read()
        try:
            target = await _target(reads, delivery_id, run.id)
        finally:
            await reads.close()
        if target is None:
            return  # deleted, or another job carries it now
        delivery, webhook = target
        db = run.db
        now = clock.now()
        if not webhook.enabled:
            await _end(db, delivery.id, run.id, DeliveryStatus.FAILED, "the endpoint is disabled")
            return
        secrets: list[str] = []
        if webhook.format is WebhookFormat.STANDARD:  # a chat format's message is not signed
            secrets.append(webhook.secret)
            if webhook.previous_secret and (webhook.previous_secret_expires_at or now) > now:
                secrets.append(webhook.previous_secret)
        outcome = await sender.send(webhook.url, secrets, delivery.event_id, delivery.payload)
        await _record(db, delivery.id, run.id, webhook.id, outcome, clock.now(), mail, public_url)

    return deliver


_TARGET = (
    select(
        WebhookDelivery.id.label("delivery_id"),
        WebhookDelivery.event_id.label("event_id"),
        WebhookDelivery.payload.label("payload"),
        *WEBHOOK.columns,
    )
    .join(Webhook, Webhook.id == WebhookDelivery.webhook_id)
    .where(
        WebhookDelivery.id == bindparam("delivery_id"),
        WebhookDelivery.job_id == bindparam("job_id"),
        WebhookDelivery.status == DeliveryStatus.PENDING,
    )
)


async def _target(
    reads: Reads, delivery_id: str, job_id: str
) -> tuple[_Delivery, WebhookRecord] | None:
    """The delivery this job carries, and its endpoint (None: deleted, done, or another job
    carries it now)."""
    row = await reads.first(_TARGET, {"delivery_id": delivery_id, "job_id": job_id})
    if row is None:
        return None
    return _Delivery(row["delivery_id"], row["event_id"], row["payload"]), WEBHOOK.of(row)


@dataclass(frozen=True, slots=True)
class _Delivery:
    id: str
    event_id: str
    payload: str


async def _current(db: AsyncSession, delivery_id: str, job_id: str) -> WebhookDelivery | None:
    """The delivery, if this job still carries it (a manual retry may have taken it over)."""
    delivery = await db.get(WebhookDelivery, delivery_id, with_for_update=True)
    if delivery is None or delivery.job_id != job_id or delivery.status != DeliveryStatus.PENDING:
        return None
    return delivery


async def _end(
    db: AsyncSession, delivery_id: str, job_id: str, status: DeliveryStatus, error: str | None
) -> None:
    delivery = await _current(db, delivery_id, job_id)
    if delivery is None:
        return
    delivery.status = status
    delivery.job_id = None
    delivery.next_attempt_at = None
    if error is not None:
        delivery.last_error = error


async def _record(
    db: AsyncSession,
    delivery_id: str,
    job_id: str,
    webhook_id: str,
    outcome: Outcome,
    now: datetime,
    mail: MailOutbox,
    public_url: str,
) -> None:
    delivery = await _current(db, delivery_id, job_id)
    if delivery is None:
        return
    db.add(
        WebhookAttempt(
            id=new_id("wha"),
            delivery_id=delivery.id,
            attempted_at=now,
            status_code=outcome.status_code,
            error=outcome.error,
            duration_ms=outcome.duration_ms,
        )
    )
    delivery.attempts += 1
    delivery.step += 1
    delivery.last_status_code = outcome.status_code
    delivery.last_error = outcome.error
    delivery.last_duration_ms = outcome.duration_ms
    delivery.last_response_body = outcome.body
    delivery.job_id = None
    delivery.next_attempt_at = None
    # The endpoint's row is shared by all its deliveries: each change to it is a conditional
    # UPDATE that changes something only when there is something to change (its last attempt
    # is kept to the second), so deliveries of one endpoint do not queue for its row lock.
    await _update(
        db, webhook_id, or_(Webhook.last_delivery_at.is_(None), Webhook.last_delivery_at < now),
        last_delivery_at=now,
    )  # fmt: skip
    if outcome.delivered:
        delivery.status = DeliveryStatus.DELIVERED
        delivery.delivered_at = now
        await _update(db, webhook_id, Webhook.failing_since.is_not(None), failing_since=None)
        return
    if outcome.status_code == 410:
        delivery.status = DeliveryStatus.FAILED
        reason = "the endpoint answered 410 Gone"
        await _update(
            db, webhook_id, Webhook.enabled.is_(True), enabled=False, disabled_reason=reason
        )
        return
    await _update(db, webhook_id, Webhook.failing_since.is_(None), failing_since=now)
    webhook = (
        await db.execute(
            select(Webhook.enabled, Webhook.failing_since).where(Webhook.id == webhook_id)
        )
    ).one()
    if webhook.enabled and now - webhook.failing_since >= DISABLE_AFTER:
        delivery.status = DeliveryStatus.FAILED
        reason = "every delivery failed for 5 days"
        # Of the deliveries that find it so at once, the one that disables it sends the mails.
        if await _update(
            db, webhook_id, Webhook.enabled.is_(True), enabled=False, disabled_reason=reason
        ):
            await _mail_admins(db, webhook_id, webhook.failing_since, mail, public_url, now)
        return
    if not webhook.enabled or delivery.step > len(RETRY_SCHEDULE):
        delivery.status = DeliveryStatus.FAILED
        return
    wait = RETRY_SCHEDULE[delivery.step - 1] * (1 + JITTER * random.random())  # noqa: S311
    # Whole seconds, as times are kept and shown (clock.py).
    schedule(db, delivery, now, now + timedelta(seconds=math.ceil(wait.total_seconds())))


async def _update(db: AsyncSession, webhook_id: str, condition: Any, **values: Any) -> bool:
    """Change the endpoint's row where `condition` holds; whether it did."""
    changed = await db.execute(
        update(Webhook)
        .where(Webhook.id == webhook_id, condition)
        .values(**values)
        .execution_options(synchronize_session=False)
    )
    return bool(changed.rowcount)  # type: ignore[attr-defined]


async def _mail_admins(
    db: AsyncSession,
    webhook_id: str,
    since: datetime,
    mail: MailOutbox,
    public_url: str,
    now: datetime,
) -> None:
    row = (
        await db.execute(
            select(Project.name, Webhook.project_id, Webhook.url)
            .join(Project, Project.id == Webhook.project_id)
            .where(Webhook.id == webhook_id)
        )
    ).one()
    project_name = row.name
    admins = await db.scalars(
        select(User.email)
        .join(ProjectMember, ProjectMember.user_id == User.id)
        .where(
            ProjectMember.project_id == row.project_id,
            ProjectMember.role.in_([ProjectRole.ADMIN, ProjectRole.OWNER]),
        )
        .order_by(User.email)
    )
    for email in admins:
        message = render(
            "webhook_disabled",
            email,
            f"A webhook of {project_name} was disabled",
            project=project_name,
            url=row.url,
            since=since.strftime("%Y-%m-%d %H:%M UTC"),
            # Its page: enable it, and send what failed again from its delivery log.
            page=webhook_url(public_url, row.project_id, webhook_id),
        )
        try:
            mail.send(db, message, now)
        except UnmailableAddress:
            continue  # an address stored before today's rules: the other admins are told

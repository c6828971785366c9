"""Sending a mail means writing it to the outbox (jobs/) in the caller's unit of work: it leaves
once that commits, never if it rolls back, and survives a restart or an SMTP outage."""

from __future__ import annotations

import asyncio
import email.policy
import email.utils
from collections.abc import Callable
from datetime import datetime
from email.headerregistry import Address
from email.message import EmailMessage
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.jobs.models import Job
from buildbay.jobs.queue import enqueue, enqueue_all, new_job
from buildbay.mail.message import Mail

MAIL_JOB = "mail"


def compose(sender: str, mail: Mail, now: datetime) -> EmailMessage:
    """The message as it will be sent, Message-ID included: a second delivery of the same job
    (see jobs/worker.py) is the same message, which mail clients show once."""
    message = EmailMessage(policy=email.policy.SMTP)
    message["From"] = sender
    message["To"] = mail.to
    message["Subject"] = mail.subject
    message["Date"] = email.utils.format_datetime(now)
    message["Message-ID"] = email.utils.make_msgid(domain=_domain_of(sender))
    message["Auto-Submitted"] = "auto-generated"  # RFC 3834: no auto-replies, please
    for name, value in mail.headers.items():
        message[name] = value
    # Quoted-printable keeps every line ASCII and short: any SMTP server takes it as it is.
    message.set_content(mail.text, cte="quoted-printable")
    message.add_alternative(mail.html, subtype="html", cte="quoted-printable")
    return message


def _domain_of(sender: str) -> str:
    _, address = email.utils.parseaddr(sender)
    return address.rpartition("@")[2] or "localhost"


class MailOutbox:
    """Writes mails from one sender (BUILDBAY_MAIL_FROM) to the outbox."""

    def __init__(self, sender: str) -> None:
        self.sender = sender

    def send(self, db: AsyncSession, mail: Mail, now: datetime) -> Job:
        return enqueue(db, MAIL_JOB, self._payload(mail, now), now)

    async def send_all(
        self, db: AsyncSession, mails: Callable[[], list[Mail]], now: datetime
    ) -> None:
        """Several mails (a distribution's), each a job of its own as `send` writes it, in as
        few statements as the database takes. `mails` makes them: it runs, and they are
        composed, in a worker thread: a large group's mails would hold the event loop for as
        long as they take (docs/performance.md); the loop then still gets its turns."""

        def payloads() -> list[dict[str, Any]]:
            return [self._payload(mail, now) for mail in mails()]

        jobs = [new_job(MAIL_JOB, payload, now) for payload in await asyncio.to_thread(payloads)]
        await enqueue_all(db, jobs)

    def _payload(self, mail: Mail, now: datetime) -> dict[str, Any]:
        return {
            "from": _address(self.sender),
            "to": [_address(mail.to)],
            "message": compose(self.sender, mail, now).as_string(),
        }


def _address(header: str) -> str:
    """The bare address of `Name <address>` (the SMTP envelope's)."""
    _, address = email.utils.parseaddr(header)
    return Address(addr_spec=address).addr_spec

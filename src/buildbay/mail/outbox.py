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
from buildbay.mail.headers import (
    UnmailableAddress,
    checked_headers,
    folded,
    header_text,
    mailable_address,
)
from buildbay.mail.message import Mail

MAIL_JOB = "mail"


def compose(sender: str, mail: Mail, now: datetime) -> str:
    """The message as it will be sent (RFC 5322 text: ASCII, CRLF line ends), Message-ID
    included: a second delivery of the same job (see jobs/worker.py) is the same message, which
    mail clients show once. What users typed reaches the headers only through
    mail/headers.py's `header_text` and `mailable_address`; Buildbay's own headers
    (List-Unsubscribe) are folded there, never encoded; and the result is checked to hold
    exactly these headers. UnmailableAddress when `mail.to` cannot be mailed."""
    message = EmailMessage(policy=email.policy.SMTP)
    message["From"] = sender
    message["To"] = mailable_address(mail.to)
    message["Subject"] = header_text(mail.subject)
    message["Date"] = email.utils.format_datetime(now)
    message["Message-ID"] = email.utils.make_msgid(domain=_domain_of(sender))
    message["Auto-Submitted"] = "auto-generated"  # RFC 3834: no auto-replies, please
    # Quoted-printable keeps every line ASCII and short: any SMTP server takes it as it is.
    message.set_content(mail.text, cte="quoted-printable")
    message.add_alternative(mail.html, subtype="html", cte="quoted-printable")
    text = message.as_string()
    if mail.headers:
        head, _, body = text.partition("\r\n\r\n")
        own = "".join(folded(name, value) for name, value in mail.headers.items())
        text = f"{head}\r\n{own}\r\n{body}"
    return checked_headers(text, [*message.keys(), *mail.headers])


def _domain_of(sender: str) -> str:
    _, address = email.utils.parseaddr(sender)
    return address.rpartition("@")[2] or "localhost"


class MailOutbox:
    """Writes mails from one sender (BUILDBAY_MAIL_FROM) to the outbox."""

    def __init__(self, sender: str) -> None:
        self.sender = sender

    def send(self, db: AsyncSession, mail: Mail, now: datetime) -> Job:
        """UnmailableAddress (a 422) if mail cannot reach `mail.to`: nothing is written."""
        return enqueue(db, MAIL_JOB, self._payload(mail, now), now)

    async def send_all(
        self, db: AsyncSession, mails: Callable[[], list[Mail]], now: datetime
    ) -> dict[str, str]:
        """Several mails (a distribution's), each a job of its own as `send` writes it, in as
        few statements as the database takes. `mails` makes them: it runs, and they are
        composed, in a worker thread: a large group's mails would hold the event loop for as
        long as they take (docs/performance.md); the loop then still gets its turns.

        A mail whose address mail cannot reach is not written, and the others are: the answer
        says which were not, by `Mail.to`, and why."""
        refused: dict[str, str] = {}

        def payloads() -> list[dict[str, Any]]:
            made = []
            for mail in mails():
                try:
                    made.append(self._payload(mail, now))
                except UnmailableAddress as exc:
                    refused[mail.to] = exc.errors[0].message if exc.errors else exc.detail
            return made

        jobs = [new_job(MAIL_JOB, payload, now) for payload in await asyncio.to_thread(payloads)]
        await enqueue_all(db, jobs)
        return refused

    def _payload(self, mail: Mail, now: datetime) -> dict[str, Any]:
        return {
            "from": _address(self.sender),
            "to": [mailable_address(mail.to)],
            "message": compose(self.sender, mail, now),
        }


def _address(header: str) -> str:
    """The bare address of `Name <address>` (the SMTP envelope's sender)."""
    _, address = email.utils.parseaddr(header)
    return Address(addr_spec=address).addr_spec

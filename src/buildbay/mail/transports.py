"""Delivering the outbox's mails: to an SMTP server (aiosmtplib), or, without one, as .eml files
under DATA_DIR/mail/ (the embedded default: a one-machine user still gets the links, from the
log). Each is the handler of the outbox's `mail` jobs."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol
from urllib.parse import unquote, urlsplit

import aiosmtplib

from buildbay.config import Settings
from buildbay.jobs.worker import Handler, JobFailed, JobRun, RetryLater

log = logging.getLogger("buildbay.mail")

SMTP_TIMEOUT_SECONDS = 30.0


class MailTransport(Protocol):
    async def deliver(self, key: str, sender: str, recipients: list[str], message: str) -> None:
        """Deliver `message` (RFC 5322 text) once; `key` names this delivery (the job's id).
        Raises JobFailed when the recipient is refused for good, anything else to retry."""


@dataclass(frozen=True, slots=True)
class SmtpServer:
    hostname: str
    port: int
    username: str | None
    password: str | None
    implicit_tls: bool  # smtps://; smtp:// upgrades with STARTTLS when the server offers it

    @classmethod
    def from_url(cls, url: str) -> SmtpServer:
        parts = urlsplit(url)
        implicit_tls = parts.scheme == "smtps"
        assert parts.hostname  # Settings checks it
        return cls(
            hostname=parts.hostname,
            port=parts.port or (465 if implicit_tls else 587),
            username=unquote(parts.username) if parts.username else None,
            password=unquote(parts.password) if parts.password else None,
            implicit_tls=implicit_tls,
        )


class SmtpTransport:
    def __init__(self, server: SmtpServer, timeout: float = SMTP_TIMEOUT_SECONDS) -> None:
        self.server = server
        self.timeout = timeout

    async def deliver(self, key: str, sender: str, recipients: list[str], message: str) -> None:
        server = self.server
        try:
            await aiosmtplib.send(
                message,  # as composed for SMTP (mail/outbox.py): sent as it is
                sender=sender,
                recipients=recipients,
                hostname=server.hostname,
                port=server.port,
                username=server.username,
                password=server.password,
                use_tls=server.implicit_tls,
                start_tls=False if server.implicit_tls else None,  # None: if offered
                timeout=self.timeout,
            )
        except aiosmtplib.SMTPRecipientsRefused as exc:
            refusals = "; ".join(f"{r.recipient}: {r.code} {r.message}" for r in exc.recipients)
            if all(r.code >= 500 for r in exc.recipients):
                raise JobFailed(f"the SMTP server refused the recipient: {refusals}") from None
            raise RetryLater(f"the SMTP server deferred the recipient: {refusals}") from None
        except aiosmtplib.SMTPAuthenticationError as exc:
            # The server's configuration, not this mail: kept for when it is fixed.
            raise RetryLater(
                f"the SMTP server refused our login ({exc.code} {exc.message}): check "
                "BUILDBAY_SMTP_URL"
            ) from None
        except aiosmtplib.SMTPResponseException as exc:
            what = f"the SMTP server answered {exc.code} {exc.message}"
            if exc.code >= 500:
                raise JobFailed(what) from None
            raise RetryLater(what) from None
        except (aiosmtplib.SMTPException, OSError) as exc:
            raise RetryLater(
                f"cannot reach the SMTP server {server.hostname}:{server.port}: {exc}"
            ) from None


class FileTransport:
    """Each mail as `DATA_DIR/mail/<job id>.eml`, written whole or not at all (a temporary file
    renamed), and the same name if the job runs twice: never two files for one mail."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    async def deliver(self, key: str, sender: str, recipients: list[str], message: str) -> None:
        path = await asyncio.to_thread(self._write, key, message)
        log.info("mail to %s written to %s", ", ".join(recipients), path)

    def _write(self, key: str, message: str) -> Path:
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / f"{key}.eml"
        temporary = self.directory / f".{key}.eml.partial"
        # The message as composed for SMTP (mail/outbox.py: ASCII, CRLF line ends), with the
        # line ends of a file on this system.
        data = message.replace("\r\n", "\n").encode("ascii")
        try:
            with temporary.open("wb") as file:
                file.write(data)
                file.flush()
                os.fsync(file.fileno())
            temporary.replace(path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                temporary.unlink()
            raise
        directory = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(directory)  # the rename itself survives a crash
        finally:
            os.close(directory)
        return path


def transport_for(settings: Settings) -> MailTransport:
    if settings.smtp_url is None:
        return FileTransport(settings.mail_dir)
    return SmtpTransport(SmtpServer.from_url(settings.smtp_url.get_secret_value()))


def mail_handler(transport: MailTransport) -> Handler:
    """The handler of `mail` jobs (written by mail/outbox.py)."""

    async def deliver(run: JobRun) -> None:
        payload = run.payload
        await transport.deliver(run.id, payload["from"], list(payload["to"]), payload["message"])

    return deliver

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


class TlsMissing(Exception):
    """The server offers no STARTTLS, and the URL's password must not cross in clear."""


@dataclass(frozen=True, slots=True)
class SmtpServer:
    """Where mail goes, from BUILDBAY_SMTP_URL (docs/operations.md, "Mail"):

    - `smtps://user:password@host:465`: TLS from the first byte;
    - `smtp://user:password@host:587`: STARTTLS, required when the URL has a user (a
      server, or a man in the middle, that offers none gets no password: nothing is sent);
      without a user, STARTTLS when the server offers it;
    - `smtp+insecure://user:password@host:25`: STARTTLS when offered, else the password and
      the mail in clear: said explicitly, for a relay on a network that is trusted.
    """

    hostname: str
    port: int
    username: str | None
    password: str | None
    implicit_tls: bool
    insecure: bool = False

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
            insecure=parts.scheme == "smtp+insecure",
        )

    @property
    def starttls_required(self) -> bool:
        return self.username is not None and not self.implicit_tls and not self.insecure


class SmtpTransport:
    def __init__(self, server: SmtpServer, timeout: float = SMTP_TIMEOUT_SECONDS) -> None:
        self.server = server
        self.timeout = timeout

    async def deliver(self, key: str, sender: str, recipients: list[str], message: str) -> None:
        server = self.server
        try:
            await self._send(sender, recipients, message)
        except TlsMissing:
            # The server's configuration (or someone between us stripping the offer), not this
            # mail: kept for when it is fixed.
            raise RetryLater(
                f"the SMTP server {server.hostname}:{server.port} offers no STARTTLS, and "
                "BUILDBAY_SMTP_URL has a password, which is sent only over TLS: nothing was "
                "sent (use smtps://, a server that offers STARTTLS, or smtp+insecure:// to "
                "send it in clear)"
            ) from None
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

    async def _send(self, sender: str, recipients: list[str], message: str) -> None:
        """One session: TLS as the URL says (see SmtpServer), then the login, then the mail,
        each step through aiosmtplib's public API; the password only after TLS is up, unless
        the URL says smtp+insecure."""
        server = self.server
        client = aiosmtplib.SMTP(
            hostname=server.hostname,
            port=server.port,
            use_tls=server.implicit_tls,
            start_tls=False,  # decided below, once the server has said what it offers
            timeout=self.timeout,
        )
        async with client:
            if not server.implicit_tls:
                try:
                    await client.ehlo()
                except aiosmtplib.SMTPHeloError:
                    await client.helo()  # an old server: no extensions, so no STARTTLS
                if client.supports_extension("starttls"):
                    await client.starttls()
                elif server.starttls_required:
                    raise TlsMissing
            if server.username is not None:
                await client.login(server.username, server.password or "")
            # As composed for SMTP (mail/outbox.py): sent as it is.
            await client.sendmail(sender, recipients, message)


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

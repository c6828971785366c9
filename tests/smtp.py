"""A real SMTP server for the tests (aiosmtpd, in a thread of its own): it keeps what it accepts,
and can refuse recipients, go down and come back on the same port, ask for a login, or hold
every message before answering it."""

from __future__ import annotations

import asyncio
import email
import email.policy
import os
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from email.message import EmailMessage
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword

from tests.processes import free_port

SIGN_UP_SUBJECT = "Confirm your e-mail address for Buildbay"


@dataclass(frozen=True)
class Received:
    sender: str
    recipients: list[str]
    message: EmailMessage

    @property
    def message_id(self) -> str:
        return str(self.message["Message-ID"])

    @property
    def text(self) -> str:
        part = self.message.get_body(("plain",))
        assert part is not None
        return str(part.get_content())  # type: ignore[attr-defined]

    @property
    def html(self) -> str:
        part = self.message.get_body(("html",))
        assert part is not None
        return str(part.get_content())  # type: ignore[attr-defined]

    def link(self, prefix: str) -> str:
        """The one line of the plain text that starts with `prefix` (the action link)."""
        [line] = [line for line in self.text.splitlines() if line.startswith(prefix)]
        return line


class _Handler:
    def __init__(self, sink: SmtpSink) -> None:
        self.sink = sink

    async def handle_RCPT(  # noqa: N802 - aiosmtpd's hook names
        self, server: Any, session: Any, envelope: Any, address: str, rcpt_options: list[str]
    ) -> str:
        if self.sink.refusal is not None:
            return self.sink.refusal
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # noqa: N802
        sink = self.sink
        if sink.gate is not None:
            with sink.lock:
                sink.held += 1
            await asyncio.to_thread(sink.gate.wait)
            if _client_gone(getattr(server, "transport", None)):
                return "421 the client is gone"  # never answered: not accepted
        content = envelope.original_content or envelope.content
        message = email.message_from_bytes(content, policy=email.policy.default)
        assert isinstance(message, EmailMessage)
        with sink.lock:
            sink.received.append(Received(envelope.mail_from, list(envelope.rcpt_tos), message))
        return "250 Message accepted for delivery"


def _client_gone(transport: asyncio.BaseTransport | None) -> bool:
    """Whether the client closed the connection, as the kernel knows it now: a client killed
    (and reaped) before the release has closed its end, but this loop may not have read that
    yet (a busy machine), and `is_closing()` alone let such a message count as accepted."""
    if transport is None or transport.is_closing():
        return True
    sock = transport.get_extra_info("socket")
    if sock is None:
        return True
    with socket.socket(fileno=os.dup(sock.fileno())) as peek:
        try:
            return peek.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
        except BlockingIOError:
            return False  # open, nothing to read: the client waits for the answer
        except OSError:
            return True  # reset


class SmtpSink:
    def __init__(self, login: tuple[str, str] | None = None) -> None:
        self.port = free_port()
        self.login = login
        self.logins: list[str] = []
        self.received: list[Received] = []
        self.refusal: str | None = None  # e.g. "550 5.1.1 no such user": answered to RCPT
        self.gate: threading.Event | None = None  # set: messages are held until it is set
        self.held = 0
        self.lock = threading.Lock()
        self._controller: Controller | None = None

    @property
    def url(self) -> str:
        user = f"{self.login[0]}:{self.login[1]}@" if self.login else ""
        return f"smtp://{user}127.0.0.1:{self.port}"

    def _authenticate(
        self, server: Any, session: Any, envelope: Any, mechanism: str, data: Any
    ) -> AuthResult:
        assert self.login is not None
        ok = (
            isinstance(data, LoginPassword)
            and (data.login.decode(), data.password.decode()) == self.login
        )
        if ok:
            self.logins.append(data.login.decode())
        return AuthResult(success=ok)

    def start(self) -> SmtpSink:
        options: dict[str, Any] = {}
        if self.login is not None:
            # Offered, not required: aiosmtpd warns (an error here) about requiring a login
            # without TLS. The client logs in whenever it has a user and password.
            options = {
                "auth_require_tls": False,  # a test server on 127.0.0.1, no certificate
                "authenticator": self._authenticate,
            }
        self._controller = Controller(
            _Handler(self), hostname="127.0.0.1", port=self.port, **options
        )
        self._controller.start()
        return self

    def stop(self) -> None:
        if self._controller is not None:
            self._controller.stop()
            self._controller = None

    def hold(self) -> None:
        """From now on, hold each message (after its data arrived, before the answer)."""
        self.gate = threading.Event()

    def release(self) -> None:
        assert self.gate is not None
        self.gate.set()

    def messages(self, *, sign_ups: bool = False) -> list[Received]:
        """What arrived, in order. Every sign-up mails a verification link to its address
        (auth/verification.py): left out unless `sign_ups`, so that a test sees the mails of
        the steps it takes, not of the accounts it makes on its way."""
        with self.lock:
            received = list(self.received)
        if sign_ups:
            return received
        return [m for m in received if m.message["Subject"] != SIGN_UP_SUBJECT]

    def wait_for(self, count: int, timeout: float = 60.0) -> list[Received]:
        """At least `count` messages, polled (from a thread that is not the test's loop)."""
        deadline = time.monotonic() + timeout
        while len(found := self.messages()) < count:
            if time.monotonic() > deadline:
                pytest.fail(f"{len(found)} of {count} mails arrived in {timeout:.0f} s")
            time.sleep(0.02)
        return found

    async def await_count(self, count: int, seconds: float = 60.0) -> list[Received]:
        """`wait_for` for async tests."""
        deadline = time.monotonic() + seconds
        while len(found := self.messages()) < count:
            if time.monotonic() > deadline:
                pytest.fail(f"{len(found)} of {count} mails arrived in {seconds:.0f} s")
            await asyncio.sleep(0.02)
        return found


@pytest.fixture
def smtp() -> Iterator[SmtpSink]:
    sink = SmtpSink().start()
    try:
        yield sink
    finally:
        if sink.gate is not None:
            sink.gate.set()
        sink.stop()

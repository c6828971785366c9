"""A real webhook receiver: a local HTTP server (a thread of its own) that checks every message
it gets with the `standardwebhooks` package, the reference library, not with our code."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from standardwebhooks.webhooks import Webhook, WebhookVerificationError


@dataclass(frozen=True)
class Answer:
    status: int = 200
    delay: float = 0.0  # seconds before answering
    body: bytes = b'{"ok":true}'
    location: str | None = None  # a Location header (for a redirect)
    # Held until the test sets it (at most 30 s): an attempt in flight while the test looks.
    release: threading.Event | None = None


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes
    verified_by: list[str]  # the known secrets that verify it
    error: str | None  # the last verification error, if none verified it

    @property
    def id(self) -> str:
        return self.headers["webhook-id"]

    @property
    def payload(self) -> dict[str, Any]:
        result: dict[str, Any] = json.loads(self.body)
        return result


@dataclass
class Receiver:
    url: str = ""
    secrets: list[str] = field(default_factory=list)  # checked in turn on each message
    answers: list[Answer] = field(default_factory=list)  # taken in turn; then 200s
    default: Answer = field(default_factory=Answer)
    received: list[Received] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def answer(self) -> Answer:
        with self.lock:
            return self.answers.pop(0) if self.answers else self.default

    def record(self, headers: dict[str, str], body: bytes) -> None:
        verified: list[str] = []
        error = None
        for secret in list(self.secrets):
            try:
                Webhook(secret).verify(body, headers)
            except WebhookVerificationError as exc:
                error = str(exc)
            else:
                verified.append(secret)
        with self.lock:
            self.received.append(Received(headers, body, verified, error))

    def by_type(self, event_type: str) -> list[Received]:
        return [r for r in self.received if r.payload["type"] == event_type]


@contextlib.contextmanager
def receiving(
    host: str = "127.0.0.1", port: int = 0, receiver: Receiver | None = None
) -> Iterator[Receiver]:
    """A receiver listening on `port` (any free one by default); `receiver` to bring one back
    on its address with what it received so far."""
    receiver = receiver or Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("content-length", "0"))
            body = self.rfile.read(length)
            receiver.record({k.lower(): v for k, v in self.headers.items()}, body)
            answer = receiver.answer()
            if answer.delay:
                time.sleep(answer.delay)
            if answer.release is not None:
                answer.release.wait(30)
            try:
                self.send_response(answer.status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(answer.body)))
                if answer.location:
                    self.send_header("location", answer.location)
                self.end_headers()
                self.wfile.write(answer.body)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the sender gave up waiting

        def log_message(self, message: str, *args: Any) -> None:
            pass

    ThreadingHTTPServer.allow_reuse_address = True
    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    receiver.url = f"http://{host}:{server.server_address[1]}/hooks"
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)

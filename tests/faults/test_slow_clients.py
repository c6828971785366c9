"""Clients that send their request bodies a byte a second, or stop sending them."""

from __future__ import annotations

import contextlib
import json
import os
import select
import socket
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from tests.faults.conftest import (
    Server,
    assert_problem_response,
    files_under,
    wait_for,
)
from tests.processes import Uploader

pytestmark = [pytest.mark.slow, pytest.mark.faults]

TIMEOUT = 3  # BUILDBAY_BODY_READ_TIMEOUT_SECONDS here: 2 s more than the pause between bytes
JSON_BODIES = 50
# Together more than a process's database pool (15 on SQLite, 20 on PostgreSQL).
LIVE_UPLOADS = 25
STALLED_UPLOADS = 10


class Trickler:
    """A raw connection that sent a request's head and sends its body a byte at a time."""

    def __init__(self, port: int, head: bytes) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.sock.sendall(head)
        self.started = self.last_sent = time.monotonic()
        self.answer: bytes | None = None  # what came back, once the server answered or closed
        self.answered_at: float | None = None

    def drip(self) -> None:
        """One more byte, unless the server has answered (or closed) meanwhile."""
        if self.answer is not None:
            return
        if select.select([self.sock], [], [], 0)[0]:
            self._read_answer()
            return
        try:
            self.sock.send(b" ")
            self.last_sent = time.monotonic()
        except OSError:
            self._read_answer()

    def answered(self) -> bool:
        """Whether the server has answered (or closed); reads the answer if so."""
        if self.answer is None and select.select([self.sock], [], [], 0)[0]:
            self._read_answer()
        return self.answer is not None

    def _read_answer(self) -> None:
        self.answered_at = time.monotonic()
        chunks = []
        try:
            while chunk := self.sock.recv(65536):
                chunks.append(chunk)
        except OSError:
            pass  # reset: the connection is closed either way
        self.answer = b"".join(chunks)
        self.sock.close()

    def check(self) -> None:
        """Answered 408 problem+json `body_timeout` and closed, or just closed."""
        assert self.answer is not None
        if not self.answer:
            return
        head, _, body = self.answer.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        assert lines[0].startswith("HTTP/1.1 408"), self.answer[:300]
        headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        assert headers["content-type"] == "application/problem+json"
        assert headers["connection"] == "close"
        problem = json.loads(body)
        assert problem["code"] == "body_timeout"
        assert problem["status"] == 408
        assert f"within {TIMEOUT} seconds" in problem["detail"]

    def close(self) -> None:
        self.sock.close()  # closing twice is harmless


def _json_head(port: int) -> bytes:
    return (
        f"POST /api/auth/login HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"
    ).encode()


def _put_head(link: dict[str, Any], size: int) -> bytes:
    url = urlsplit(link["uploadUrl"])
    return (
        f"PUT {url.path}?{url.query} HTTP/1.1\r\nHost: {url.netloc}\r\n"
        f"Content-Type: application/octet-stream\r\nContent-Length: {size}\r\n\r\nx"
    ).encode()


class Dripper:
    """A byte a second to each trickler, from a thread of its own, until stopped."""

    def __init__(self, tricklers: list[Trickler]) -> None:
        self._tricklers = tricklers
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            for trickler in self._tricklers:
                trickler.drip()
            if self._stop.wait(1.0):
                return

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


def test_slow_bodies_hold_only_their_own_connections_and_the_body_read_timeout_ends_them(
    server_env: dict[str, str], servers: Callable[..., Server]
) -> None:
    """50 JSON bodies and 25 uploads arrive a byte a second, and 10 more uploads stop after
    their first byte, while other clients work. Catches: a slow body starving other requests
    (a database connection, a worker thread or the event loop held while a body trickles in:
    35 uploads are more than the database pool, and other requests would wait 30 s for it);
    no body read timeout (uvicorn has none: the tricklers would hold their connections
    forever); a stalled upload that is not cut off, or that leaves its partial file behind; a
    timeout that cuts off an upload which keeps sending, however slowly."""
    env = dict(
        server_env,
        BUILDBAY_BODY_READ_TIMEOUT_SECONDS=str(TIMEOUT),
        BUILDBAY_RATE_LIMIT_ENABLED="false",
    )
    server = servers(env).start()
    with contextlib.ExitStack() as cleanup:
        _slow_clients(server, cleanup)


def _slow_clients(server: Server, cleanup: contextlib.ExitStack) -> None:
    incoming = server.data_dir / "builds" / "incoming"
    data = os.urandom(64 * 1024)
    with httpx.Client(base_url=server.base, timeout=60) as http:
        user = Uploader.sign_up(http)
        links = [user.link(len(data)) for _ in range(LIVE_UPLOADS + STALLED_UPLOADS)]
        uploads = [Trickler(server.port, _put_head(link, len(data))) for link in links]
        live, stalled = uploads[:LIVE_UPLOADS], uploads[LIVE_UPLOADS:]
        bodies = [Trickler(server.port, _json_head(server.port)) for _ in range(JSON_BODIES)]
        for trickler in uploads + bodies:
            cleanup.callback(trickler.close)
        dripper = Dripper(live + bodies)
        try:
            wait_for(
                lambda: len(files_under(incoming)) == len(uploads),
                "every slow upload to have started",
            )

            # Others are served at once meanwhile: reads, writes and whole uploads alike.
            latencies = []
            deadline = time.monotonic() + TIMEOUT + 1
            while time.monotonic() < deadline or len(latencies) < 30:
                for send in (
                    lambda: http.get("/api/projects", headers=user.headers),
                    lambda: http.post(
                        "/api/projects", json={"name": f"p{len(latencies)}"}, headers=user.headers
                    ),
                    lambda: http.get("/healthz"),
                ):
                    started = time.monotonic()
                    r = send()
                    latencies.append(time.monotonic() - started)
                    assert r.status_code in (200, 201), r.text
            link = user.link(len(data))
            r = httpx.put(link["uploadUrl"], content=data, timeout=60)
            assert r.status_code == 200, r.text
            assert statistics.median(latencies) < 0.1, sorted(latencies)[-5:]
            assert max(latencies) < 2.0, sorted(latencies)[-5:]

            # JSON bodies are cut off once they have taken the timeout, and stalled uploads
            # once they have sent nothing for that long; uploads still sending go on.
            wait_for(
                lambda: (
                    all(body.answer is not None for body in bodies)
                    and all(upload.answered() for upload in stalled)
                ),
                "every slow JSON body and every stalled upload to be answered",
            )
            assert all(upload.answer is None for upload in live), "a live upload was cut off"
            assert all(time.monotonic() - upload.started > TIMEOUT + 1 for upload in live)
        finally:
            dripper.stop()
        for body in bodies:  # a whole body gets TIMEOUT seconds
            body.check()
            assert body.answered_at is not None
            assert body.answered_at - body.started >= TIMEOUT - 0.1
        for upload in stalled:  # an upload gets TIMEOUT seconds between two chunks
            upload.check()
            assert upload.answered_at is not None
            assert upload.answered_at - upload.last_sent >= TIMEOUT - 0.1
        # Nothing of the stalled uploads was kept; the live ones still have their files.
        assert len(files_under(incoming)) == LIVE_UPLOADS
        assert_problem_response(user.verify(links[-1]["buildId"]), 422, "upload_incomplete")
        for upload in live:
            upload.close()  # the clients give up: their files go too
        wait_for(lambda: files_under(incoming) == [], "the abandoned uploads' files to go")

        # The same upload URL works for a client that sends at a normal pace.
        r = httpx.put(links[-1]["uploadUrl"], content=data, timeout=60)
        assert r.status_code == 200, r.text
        assert user.verify(links[-1]["buildId"]).status_code == 200

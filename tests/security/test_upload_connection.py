"""An upload that sends more than it declared, or to a URL it may not use, is answered at once
and its connection is closed: the server does not go on reading (and throwing away) whatever
the client keeps sending. Against a real `buildbay serve`, with a raw socket that never stops
sending on its own (bounded by CAP and DEADLINE)."""

from __future__ import annotations

import json
import os
import selectors
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import httpx
import pytest

from tests.processes import Uploader

pytestmark = pytest.mark.slow

DECLARED = 64 * 1024
CAP = 64 * 1024 * 1024  # what the client is willing to send at most
DEADLINE = 30.0
CHUNK = b"x" * 16 * 1024


@dataclass
class Outcome:
    response: bytes  # everything the server answered
    sent: int  # body bytes the client got out before the connection ended
    closed: bool  # the server ended the connection (FIN or RST)

    @property
    def status(self) -> int:
        return int(self.response.split(b" ", 2)[1])

    @property
    def headers(self) -> dict[str, str]:
        head = self.response.split(b"\r\n\r\n", 1)[0].decode("latin-1")
        lines = head.split("\r\n")[1:]
        return {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines)}

    @property
    def problem(self) -> dict[str, Any]:
        problem: dict[str, Any] = json.loads(self.response.split(b"\r\n\r\n", 1)[1])
        return problem


def send_forever(port: int, head: bytes, frame: Callable[[bytes], bytes]) -> Outcome:
    """Send `head`, then body chunks (each framed by `frame`) without end, reading whatever the
    server answers, until the server closes the connection or CAP / DEADLINE is reached."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setblocking(False)
    selector = selectors.DefaultSelector()
    selector.register(sock, selectors.EVENT_READ | selectors.EVENT_WRITE)
    pending, sent, response, closed = head, -len(head), b"", False
    deadline = time.monotonic() + DEADLINE
    try:
        while not closed and sent < CAP and time.monotonic() < deadline:
            for _, events in selector.select(timeout=1):
                try:
                    if events & selectors.EVENT_READ:
                        data = sock.recv(65536)
                        response += data
                        closed = not data
                    if events & selectors.EVENT_WRITE and not closed:
                        pending = pending or frame(CHUNK)
                        written = sock.send(pending)
                        pending, sent = pending[written:], sent + written
                except (BrokenPipeError, ConnectionResetError):
                    closed = True
        if closed:  # the answer may have come just before the end: collect what is left
            sock.settimeout(1)
            while data := _recv(sock):
                response += data
    finally:
        selector.close()
        sock.close()
    return Outcome(response, max(sent, 0), closed)


def _recv(sock: socket.socket) -> bytes:
    try:
        return sock.recv(65536)
    except OSError:
        return b""


def chunked(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def raw(data: bytes) -> bytes:
    return data


def put_head(url: str, framing: str) -> bytes:
    parts = urlsplit(url)
    return (
        f"PUT {parts.path}?{parts.query} HTTP/1.1\r\n"
        f"Host: {parts.netloc}\r\n"
        "Content-Type: application/octet-stream\r\n"
        f"{framing}\r\n"
        "\r\n"
    ).encode()


@pytest.fixture
def uploader(server: str) -> Iterator[Uploader]:
    with httpx.Client(base_url=server, timeout=30) as http:
        yield Uploader.sign_up(http)


def tampered(url: str) -> str:
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    query["signature"] = "0" * 64
    return parts._replace(query=urlencode(query)).geturl()


CASES = {
    # (what is sent, the answer's status and code)
    "a chunked body past the declared size": ("chunked", 413, "upload_too_large"),
    "a Content-Length above the declared size": ("length", 413, "upload_too_large"),
    "a bad signature": ("bad signature", 403, "invalid_signature"),
}


def test_an_endless_upload_is_answered_and_its_connection_closed(
    server: str, uploader: Uploader
) -> None:
    # One server for all the cases: starting one takes seconds.
    port = urlsplit(server).port or 80
    for case, (kind, status, code) in CASES.items():
        link = uploader.link(DECLARED, "endless.apk")
        url = tampered(link["uploadUrl"]) if kind == "bad signature" else link["uploadUrl"]
        if kind == "length":
            head, frame = put_head(url, f"Content-Length: {1024**4}"), raw
        else:
            head, frame = put_head(url, "Transfer-Encoding: chunked"), chunked

        outcome = send_forever(port, head, frame)

        assert outcome.response, f"{case}: no answer after {outcome.sent} bytes"
        assert outcome.status == status, (case, outcome.response[:500])
        assert outcome.headers["content-type"] == "application/problem+json"
        assert outcome.problem["code"] == code
        assert outcome.headers["connection"] == "close", case
        assert outcome.closed, f"{case}: still open after {outcome.sent} bytes"
        # Closed once the socket buffers between client and server were full, not at the CAP.
        assert outcome.sent < CAP // 2, (case, outcome.sent)
        # Nothing of it was kept, and the same link still takes a proper upload.
        r = uploader.verify(link["buildId"])
        assert r.status_code == 422, r.text
        assert r.json()["code"] == "upload_incomplete"
        # Bytes of each case's own: the same file again would be the build it already is.
        content = os.urandom(DECLARED)
        r = uploader.http.put(link["uploadUrl"], content=content, headers=link["uploadHeaders"])
        assert r.status_code == 200, r.text
        assert uploader.verify(link["buildId"]).status_code == 200


def test_a_client_that_disconnects_mid_upload_is_logged_as_an_abort_not_an_error(
    server: str, uploader: Uploader, tmp_path: Path
) -> None:
    port = urlsplit(server).port or 80
    link = uploader.link(DECLARED, "abandoned.apk")
    sock = socket.create_connection(("127.0.0.1", port))
    try:
        sock.sendall(put_head(link["uploadUrl"], f"Content-Length: {DECLARED}"))
        sock.sendall(CHUNK)  # a quarter of the body, then the client is gone
    finally:
        sock.close()

    log = tmp_path / "server.log"
    deadline = time.monotonic() + DEADLINE
    while " 499 " not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    text = log.read_text()
    lines = [line for line in text.splitlines() if "abandoned" in line or "/storage/" in line]
    assert any(" 499 " in line for line in lines), text
    assert "Traceback" not in text, text
    assert "ClientDisconnect" not in text, text
    assert not [line for line in text.splitlines() if "ERROR" in line], text
    # Nothing of it was kept: the build still waits for its bytes, and the link still works.
    r = uploader.verify(link["buildId"])
    assert r.status_code == 422, r.text
    assert r.json()["code"] == "upload_incomplete"
    r = uploader.http.put(link["uploadUrl"], content=b"x" * DECLARED, headers=link["uploadHeaders"])
    assert r.status_code == 200, r.text

"""One pure-ASGI middleware for what every request needs before and after the routes run:
a request id, the JSON body rules of /api (Content-Type, 1 MiB; a feedback's form instead:
multipart, 60 MiB; a build's blockmap: raw bytes, 16 MiB), the RateLimit headers, the
security headers (buildbay/security_headers.py), a time limit on reading a request body, and
closing the connection after an answer given before the request's body was read."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
import uuid
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from starlette.datastructures import MutableHeaders
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from buildbay.builds.blockmap import MAX_BLOCKMAP_BYTES
from buildbay.feedback.submission import MAX_BODY as MAX_FEEDBACK_BODY
from buildbay.numbers import whole_number
from buildbay.problems import PROBLEM_CONTENT_TYPE, problem_body
from buildbay.security_headers import SecurityHeaders
from buildbay.storage.local import UPLOAD_PATH

access_log = logging.getLogger("buildbay.access")

MAX_JSON_BODY = 1024 * 1024
BODY_READ_TIMEOUT = 30.0
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
_BODY_METHODS = {"POST", "PUT", "PATCH", "DELETE"}
# The one /api body that is not JSON: a feedback's form, with its screenshots (feedback/).
_FEEDBACK = re.compile(r"^/api/app-distribution/[^/]+/[^/]+/builds/[^/]+/feedback$")
# And a build's blockmap: the raw bytes electron-builder wrote (builds/blockmap.py).
_BLOCKMAP = re.compile(r"^/api/app-distribution/[^/]+/[^/]+/builds/[^/]+/blockmap$")
# The pages' own feedback forms (console/feedback_form.py): their screenshots come from a phone
# as an upload's do. Their size is counted where they are read.
_PAGE_FEEDBACK = re.compile(r"^/(?:install/[^/]+|projects/[^/]+/apps/[^/]+/builds/[^/]+)/feedback$")
_JSON_LIMIT = "JSON request bodies are limited to 1 MiB"
_BLOCKMAP_LIMIT = f"A blockmap has at most {MAX_BLOCKMAP_BYTES // (1024 * 1024)} MiB"
_FEEDBACK_LIMIT = f"A feedback's body is at most {MAX_FEEDBACK_BODY // (1024 * 1024)} MiB"


@dataclass(frozen=True)
class _BodyRule:
    """What a body that is not JSON must say of itself before a byte of it is read: its media
    type, and a Content-Length within `limit` (a larger one: `too_large_code`)."""

    limit: int
    too_large_code: str
    too_large: str
    media: str
    wrong_media: str


_FEEDBACK_BODY = _BodyRule(
    MAX_FEEDBACK_BODY, "body_too_large", _FEEDBACK_LIMIT, "multipart/form-data",
    "Send feedback as multipart/form-data (text, category, context, screenshots)",
)  # fmt: skip
_BLOCKMAP_BODY = _BodyRule(
    MAX_BLOCKMAP_BYTES, "upload_too_large", _BLOCKMAP_LIMIT, "application/octet-stream",
    "Send the blockmap's bytes as they are, with Content-Type: application/octet-stream",
)  # fmt: skip


def _check_declared_body(
    headers: dict[str, str], rule: _BodyRule, *, has_body: bool
) -> tuple[int, str, str] | None:
    """A feedback's form or a blockmap's bytes: refused before a byte is read when they say
    they are too large, or are not of `rule`'s media type."""
    text = headers.get("content-length")
    length = whole_number(text, max_digits=20) if text is not None else None
    if text is not None and length is None:
        return 400, "bad_request", "Content-Length is not a number"
    if length is not None and length > rule.limit:
        return 413, rule.too_large_code, rule.too_large
    media = headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if has_body and media != rule.media:
        return 400, "unsupported_content_type", rule.wrong_media
    return None


def _is_json(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )


class ApiMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        max_json_body: int = MAX_JSON_BODY,
        body_read_timeout: float = BODY_READ_TIMEOUT,
        security_headers: SecurityHeaders | None = None,
    ) -> None:
        self.app = app
        self.max_json_body = max_json_body
        self.body_read_timeout = body_read_timeout
        self.security_headers = security_headers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        given = headers.get("x-request-id", "")
        request_id = given if _REQUEST_ID.match(given) else uuid.uuid4().hex
        state: dict[str, Any] = scope.setdefault("state", {})
        state["request_id"] = request_id

        started = time.perf_counter()
        status = 500  # what the log says if the app fails before answering
        security = self.security_headers.for_path(scope["path"]) if self.security_headers else []

        if "\x00" in scope["path"]:
            # No id has one, and PostgreSQL cannot even compare text with one: nothing is here.
            await _send_problem(
                send,
                404,
                "not_found",
                "No resource has a NUL character in its path",
                request_id,
                security,
            )
            _log_access(scope, 404, started, request_id)
            return

        has_body = _has_body(headers)
        form = False
        if scope["path"].startswith("/api/") and scope["method"] in _BODY_METHODS:
            form = scope["method"] == "POST" and bool(_FEEDBACK.match(scope["path"]))
            raw = scope["method"] == "PUT" and bool(_BLOCKMAP.match(scope["path"]))
            rule = _FEEDBACK_BODY if form else _BLOCKMAP_BODY if raw else None
            if rule is not None:
                problem = _check_declared_body(headers, rule, has_body=has_body)
            else:
                problem = self._check_body_headers(headers, has_body=has_body)
            if problem is not None:
                status, code, detail = problem
                await _send_problem(send, status, code, detail, request_id, security)
                _log_access(scope, status, started, request_id)
                return
            if rule is not None:
                receive = _limited(receive, rule.limit, rule.too_large)
            else:
                receive = _limited(receive, self.max_json_body, _JSON_LIMIT)

        # An answer sent before the body was read to its end (a 413 on an upload past its
        # declared size, a 403 on a bad signature, a JSON body over 1 MiB, a 408 on a body too
        # slow) closes the connection. Kept open, the server would go on reading whatever the
        # client still sends, for as long as it sends it, only to throw it away.
        body = None
        if has_body:
            # An upload's (a build file, a feedback's screenshots from a phone) may rightly take
            # longer than the timeout as a whole: each chunk must arrive within it.
            upload = (
                scope["path"].startswith(UPLOAD_PATH)
                or form
                or (scope["method"] == "POST" and bool(_PAGE_FEEDBACK.match(scope["path"])))
            )
            body = _BodyReading(receive, self.body_read_timeout, per_chunk=upload)
            receive = body.receive

        async def send_with_headers(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                response_headers = MutableHeaders(scope=message)
                response_headers.append("X-Request-ID", request_id)
                for name, value in security:
                    response_headers.setdefault(name, value)
                if body is not None and not body.finished:
                    response_headers["Connection"] = "close"
                ratelimit = state.get("ratelimit")
                if ratelimit is not None:
                    for name, value in ratelimit.headers().items():
                        response_headers.append(name, value)
            await send(message)

        try:
            await self.app(scope, receive, send_with_headers)
        finally:
            _log_access(scope, status, started, request_id)

    def _check_body_headers(
        self, headers: dict[str, str], *, has_body: bool
    ) -> tuple[int, str, str] | None:
        text = headers.get("content-length")
        length = whole_number(text, max_digits=20) if text is not None else None
        if text is not None and length is None:
            return 400, "bad_request", "Content-Length is not a number"
        if length is not None and length > self.max_json_body:
            return 413, "body_too_large", _JSON_LIMIT
        if has_body and not _is_json(headers.get("content-type", "")):
            return (
                400,
                "unsupported_content_type",
                "Send the request body as JSON with Content-Type: application/json",
            )
        return None


def _limited(receive: Receive, limit: int, refusal: str) -> Receive:
    """`receive`, which stops the body with 413 once more than `limit` bytes have come."""
    received = 0

    async def limited_receive() -> Message:
        nonlocal received
        message = await receive()
        if message["type"] == "http.request":
            received += len(message.get("body", b""))
            if received > limit:
                raise HTTPException(413, refusal)
        return message

    return limited_receive


def _has_body(headers: dict[str, str]) -> bool:
    length = whole_number(headers.get("content-length", ""), max_digits=20)
    return "transfer-encoding" in headers or (length is not None and length > 0)


class _BodyReading:
    """The request's `receive`, noting whether the app has read the body to its end, and
    bounding how long that takes.

    uvicorn waits for a body as long as the client likes, so a client that trickles it (or
    stops sending it) would hold its request forever. Here a body must arrive whole within
    `timeout` seconds of the first read; an upload's (`per_chunk`), which may rightly take
    hours, must not pause longer than that between two chunks. Past it: 408 `body_timeout`.
    """

    __slots__ = ("_deadline", "_per_chunk", "_receive", "_timeout", "finished")

    def __init__(self, receive: Receive, timeout: float, *, per_chunk: bool) -> None:
        self._receive = receive
        self._timeout = timeout
        self._per_chunk = per_chunk
        self._deadline: float | None = None
        self.finished = False

    async def receive(self) -> Message:
        if self.finished:  # e.g. waiting for a disconnect while a response streams: no limit
            return await self._receive()
        if self._deadline is None or self._per_chunk:
            self._deadline = asyncio.get_running_loop().time() + self._timeout
        try:
            async with asyncio.timeout_at(self._deadline):
                message = await self._receive()
        except TimeoutError:
            what = (
                "No bytes of the upload arrived" if self._per_chunk else "The body did not arrive"
            )
            raise HTTPException(408, f"{what} within {self._timeout:g} seconds") from None
        if message["type"] == "http.request" and not message.get("more_body", False):
            self.finished = True
        return message


# Addresses whose next segment is a credential: an install link's token (and its download,
# manifest, icon and device registration), an invitation's, an unsubscribe link's, a device
# enrollment's challenge and the reference of the page after it, a feedback screenshot's, a
# group's public join link's and its confirmation mail's; and an application's update key
# (public, in every installed copy, but a key: /feeds/{updateKey}/...).
# tests/test_access_log.py checks that every route with a `{token}` in its path is one of them.
_SECRET_SEGMENT = re.compile(
    r"^(/(?:install|invitations|unsubscribe|devices/enroll|devices/enrolled"
    r"|feedback-screenshots|join|join-confirm|feeds)/)[^/]*"
)
# What a logged path keeps as it is; anything else (a space, a line break, a non-ASCII
# character) is written percent-encoded, so that a path cannot forge a line of the log.
_LOGGED_AS_IS = "/-._~!$&'()*+,;=:@{}"
_PLAIN = re.compile(r"[A-Za-z0-9/\-._~!$&'()*+,;=:@{}]*")


def loggable_path(path: str) -> str:
    """The path as the access log writes it: a secret segment as `{token}`, percent-encoded.
    Never the query string: storage URLs carry their signature there, a reset link its token,
    and a log line must not be a credential."""
    secret = _SECRET_SEGMENT.match(path)
    masked = f"{secret[1]}{{token}}{path[secret.end() :]}" if secret else path
    if _PLAIN.fullmatch(masked):  # most paths: as they are, without quote's cost
        return masked
    return quote(masked, safe=_LOGGED_AS_IS, errors="surrogatepass")


def _log_access(scope: Scope, status: int, started: float, request_id: str) -> None:
    if access_log.isEnabledFor(logging.INFO):
        access_log.info(
            '%s "%s %s" %d %.1fms %s',
            scope["client"][0] if scope.get("client") else "-",
            scope["method"],
            loggable_path(scope["path"]),
            status,
            (time.perf_counter() - started) * 1000,
            request_id,
        )


async def _send_problem(
    send: Send,
    status: int,
    code: str,
    detail: str,
    request_id: str,
    extra_headers: list[tuple[str, str]],
) -> None:
    body = json.dumps(problem_body(status, code, detail, request_id)).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", PROBLEM_CONTENT_TYPE.encode()),
                (b"content-length", str(len(body)).encode()),
                (b"x-request-id", request_id.encode()),
                (b"connection", b"close"),
                *((name.encode(), value.encode()) for name, value in extra_headers),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})

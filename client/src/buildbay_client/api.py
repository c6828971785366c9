"""The Python SDK: `Buildbay` (synchronous) and `AsyncBuildbay` (asyncio), over httpx.

Both run the same ops (ops.py) and the same flows: each multi-step job (a request with
its retries, an upload, a download) is written once, in `_Core`, as a generator that yields
what it needs done (send this, sleep that long, PUT the file) and gets the outcome back; each
client carries those actions out its own way, blocking or awaited. The policy:

- errors come back as typed exceptions (errors.py) carrying the problem+json answer;
- 429 waits for Retry-After, 503 and a connection that could not be opened are retried with
  exponential backoff; a connection that broke after the request was sent is retried only for
  an idempotent step (never a second upload link or a second project);
- an expired access token is refreshed with the refresh token, once, and the new pair handed to
  `on_tokens` (the CLI saves it);
- `upload_build` runs the three steps, streams the file from disk (memory stays flat whatever
  its size), declares its SHA-256, retries the PUT when the connection breaks or the server is
  restarting, and answers the ready build. A file above `multipart_threshold` goes in parts,
  several at once; the upload's state is kept under `resume_dir`, so that uploading the same
  file again after a kill or a broken network sends only the parts the server lacks.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import os
import random
import re
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Generator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar, cast

import httpx

from buildbay_client import __version__, ops, resume
from buildbay_client.errors import (
    ApiError,
    BuildbayClientError,
    NetworkError,
    UnexpectedAnswer,
    error_for,
)
from buildbay_client.models import (
    MAX_NOTES_LENGTH,
    AnswerError,
    Build,
    BuildStatus,
    ReceivedParts,
    TokenResponse,
    UploadLink,
)
from buildbay_client.ops import Op

P = ParamSpec("P")
T = TypeVar("T")

CHUNK = 1024 * 1024
Progress = Callable[[int, int], None]  # (bytes sent, total bytes)
MULTIPART_THRESHOLD = 64 * 1024 * 1024  # above it, a file goes in parts
PARTS_IN_FLIGHT = 4
_PARTS_PER_REQUEST = 100  # part addresses the server hands out at a time
_SMALLEST_IN_PARTS = 5 * 1024 * 1024  # the server takes parts from 5 MiB
_POLL_SECONDS = 2.0  # between two looks at a build being checked in the background


def default_resume_dir() -> Path:
    """Where upload state is kept unless told: `uploads/` in the CLI's config directory."""
    from buildbay_client.config import config_dir

    return config_dir() / "uploads"


@dataclass
class RetryPolicy:
    """8 tries with delays of 0.5, 1, 2, 4, 8, 15 and 15 s (each cut by up to half at random):
    23-45 s in all, enough for a server to restart. A host name that does not resolve is not
    retried. `on_retry(why, seconds, attempt)` is told before each wait (the CLI says it)."""

    attempts: int = 8  # tries of one step in all
    base_delay: float = 0.5
    max_delay: float = 15.0
    max_retry_after: float = 120.0
    on_retry: Callable[[str, float, int], None] | None = None

    def backoff(self, attempt: int) -> float:
        """Exponential, with jitter so that many CI jobs do not retry in step."""
        jitter = random.uniform(0.5, 1.0)  # noqa: S311  (spreading retries, not a secret)
        return min(self.max_delay, self.base_delay * 2.0**attempt) * jitter


def _size_of(path: Path) -> int:
    return path.stat().st_size


def file_sha256(path: Path) -> str:
    with path.open("rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()


# -- what a flow asks its client to do ----------------------------------------------------------


@dataclass(frozen=True)
class _Send:
    """One HTTP request; back comes the response, or the transport error."""

    request: dict[str, Any]


@dataclass(frozen=True)
class _Put:
    """The file's first `size` bytes to an upload address; the response, or the error."""

    url: str
    headers: dict[str, str]
    file: Path
    size: int
    progress: Progress | None


@dataclass(frozen=True)
class _Part:
    number: int
    url: str
    headers: dict[str, str]
    offset: int
    size: int


class _Tally:
    """Bytes sent by parts in flight at once, reported as one progress (thread-safe)."""

    def __init__(self, total: int, done: int, progress: Progress | None) -> None:
        self.total, self.done, self._progress = total, done, progress
        self._lock = threading.Lock()
        self.report()

    def add(self, count: int) -> None:
        with self._lock:
            self.done += count
            self.report()

    def report(self) -> None:
        if self._progress is not None:
            self._progress(self.done, self.total)


@dataclass(frozen=True)
class _PutParts:
    """PUT these parts of `file`, `in_flight` at a time; back comes each part's response or
    transport error, by part number."""

    parts: list[_Part]
    file: Path
    in_flight: int
    tally: _Tally


@dataclass(frozen=True)
class _Fetch:
    """A GET of a signed address into `target`; None, or the transport error (an error answer
    raises)."""

    url: str
    target: Path
    total: int
    progress: Progress | None


@dataclass(frozen=True)
class _Sleep:
    """Wait: before trying again, `why` (a sentence) before try number `attempt` + 1; or,
    without a why, for the server (a build checked in the background)."""

    seconds: float
    why: str = ""
    attempt: int = 0


@dataclass(frozen=True)
class _Refresh:
    """Refresh the tokens under the client's lock, unless they changed since `sent_with`."""

    sent_with: str | None


@dataclass(frozen=True)
class _Local:
    """Blocking local work (hashing, a stat); its result comes back."""

    function: Callable[..., Any]
    args: tuple[Any, ...]


_Action = _Send | _Put | _PutParts | _Fetch | _Sleep | _Refresh | _Local
Flow = Generator[_Action, Any, T]


class _Core:
    """What both clients share: addresses, tokens, and how an answer becomes a result or an
    error or a retry."""

    def __init__(
        self,
        base_url: str,
        token: str | None,
        refresh_token: str | None,
        on_tokens: Callable[[TokenResponse], None] | None,
        retry: RetryPolicy | None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.refresh_token = refresh_token
        self.on_tokens = on_tokens
        self.retry = retry or RetryPolicy()
        # Each client holds a lock (`_refreshing`) so that one refresh runs at a time: a refresh
        # token is single use, and a second use of it makes the server revoke the session.

    def _request(self, op: Op[Any]) -> dict[str, Any]:
        headers = {"Accept": "application/json"}
        if op.authenticated and self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        request: dict[str, Any] = {
            "method": op.method,
            "url": self.base_url + op.path,
            "params": op.params or None,
            "headers": headers,
        }
        if op.json is not None:
            request["json"] = op.json
        elif op.method in ("POST", "PUT"):
            request["json"] = {}
        return request

    def _delay(self, attempt: int, response: httpx.Response | None, op: Op[Any] | None) -> float:
        """Seconds to wait before trying again, or -1 not to."""
        if attempt + 1 >= self.retry.attempts:
            return -1
        if response is None:  # the connection broke after sending: only an idempotent step
            return self.retry.backoff(attempt) if op is None or op.idempotent else -1
        if response.status_code in (429, 503):
            after = _retry_after(response.headers.get("retry-after", ""))
            if after is not None:
                return min(after, self.retry.max_retry_after)
            return self.retry.backoff(attempt)
        if response.status_code in (502, 504) and (op is None or op.idempotent):
            return self.retry.backoff(attempt)
        return -1

    def _wants_refresh(self, op: Op[Any], response: httpx.Response) -> bool:
        return (
            op.authenticated
            and response.status_code == 401
            and self.refresh_token is not None
            and _problem(response).get("code") == "token_expired"
        )

    def _took_tokens(self, tokens: TokenResponse) -> None:
        self.token, self.refresh_token = tokens.access_token, tokens.refresh_token
        if self.on_tokens is not None:
            self.on_tokens(tokens)

    def _result(self, op: Op[T], response: httpx.Response) -> T:
        if response.is_error:
            raise error_for(response.status_code, _problem(response))
        if op.model is None:
            return None  # type: ignore[return-value]
        try:
            body = response.json()
        except ValueError:
            why = "not JSON"
        else:
            try:
                return op.parse(body)
            except AnswerError as exc:
                why = str(exc)
        raise UnexpectedAnswer(
            f"{op.method} {op.path} answered {response.status_code} with a body this client "
            f"does not understand ({why}): is {self.base_url} a Buildbay server, of a version "
            "this client knows?"
        )

    def _put_outcome(self, response: httpx.Response, attempt: int) -> float | str:
        """After a PUT of the file: "done", "relink" (its address expired), or seconds to wait
        before sending it again (raises when it is not worth it)."""
        if response.is_success:
            return "done"
        problem = _problem(response)
        if problem.get("code") == "url_expired" and attempt + 1 < self.retry.attempts:
            return "relink"
        delay = self._delay(attempt, response, None)
        if delay < 0:
            raise error_for(response.status_code, problem)
        return delay

    def _broken(
        self, exc: httpx.TransportError, attempt: int, op: Op[Any] | None, url: str
    ) -> _Sleep:
        """How long to wait after a transport failure on the way to `url`, and why; raises when
        it is not worth retrying (a host name that does not resolve will not start to)."""
        where = _origin(url)
        if not isinstance(exc, _PASSING):
            raise NetworkError(f"cannot send the request to {where}: {exc}") from exc
        if _unresolvable(exc):
            raise NetworkError(
                f"cannot find {where}: its host name does not resolve ({exc}); check the URL"
            ) from exc
        delay = self._delay(attempt, None, op if _sent(exc) else None)
        if delay < 0:
            raise NetworkError(f"cannot reach {where}: {_reason(exc)}") from exc
        return _Sleep(delay, f"cannot reach {where}: {_reason(exc)}", attempt + 1)

    def _answered(self, response: httpx.Response, delay: float, attempt: int) -> _Sleep:
        where = _origin(str(response.request.url))
        return _Sleep(delay, f"{where} answered {response.status_code}", attempt + 1)

    def _upload_headers(self, link: UploadLink, size: int) -> dict[str, str]:
        # Never the Authorization header: the signed URL is the credential, and with S3 storage
        # it is another host.
        return {**link.upload_headers, "Content-Length": str(size)}

    # -- flows -------------------------------------------------------------------------------------

    def _send_flow(self, op: Op[Any]) -> Flow[httpx.Response]:
        """`op` sent with the retry and refresh policy: the final response."""
        refreshed = False
        attempt = 0
        while True:
            sent_with = self.token
            request = self._request(op)
            answer = yield _Send(request)
            if isinstance(answer, httpx.TransportError):
                wait = self._broken(answer, attempt, op, request["url"])
            else:
                if not refreshed and self._wants_refresh(op, answer):
                    yield _Refresh(sent_with)
                    refreshed = True
                    continue
                delay = self._delay(attempt, answer, op) if answer.is_error else -1
                if delay < 0:
                    return cast("httpx.Response", answer)
                wait = self._answered(answer, delay, attempt)
            yield wait
            attempt += 1

    def _run_flow(self, op: Op[T]) -> Flow[T]:
        response = yield from self._send_flow(op)
        return self._result(op, response)

    def _upload_flow(
        self,
        project_id: str,
        app_id: str,
        path: str | os.PathLike[str],
        notes: str | None,
        install_link_hours: int | None,
        progress: Progress | None,
        release: _Release,
        parts: _PartsOptions | None = None,
    ) -> Flow[Build]:
        _check_notes(notes)
        file = Path(path)
        size = yield _Local(_size_of, (file,))
        if parts is not None and size > max(parts.threshold, _SMALLEST_IN_PARTS):
            return (
                yield from self._parts_flow(
                    project_id, app_id, file, notes, install_link_hours, progress, parts, release
                )
            )
        sha256 = yield _Local(file_sha256, (file,))
        new_link = ops.upload_link(project_id, app_id, file.name, size, sha256)
        link = yield from self._run_flow(new_link)
        attempt = 0
        while True:
            if link.upload_url is None:
                raise UnexpectedAnswer("the upload link has no uploadUrl")
            answer = yield _Put(
                link.upload_url, self._upload_headers(link, size), file, size, progress
            )
            if isinstance(answer, httpx.TransportError):
                wait = self._broken(answer, attempt, None, link.upload_url)  # same bytes again
            else:
                outcome = self._put_outcome(answer, attempt)
                if outcome == "done":
                    break
                if outcome == "relink":
                    link = yield from self._run_flow(new_link)
                    attempt += 1
                    continue
                wait = self._answered(answer, float(outcome), attempt)
            yield wait
            attempt += 1
        verify = release.verify(project_id, app_id, link.build_id, notes, install_link_hours)
        return (yield from self._run_flow(verify))

    def _parts_flow(
        self,
        project_id: str,
        app_id: str,
        file: Path,
        notes: str | None,
        install_link_hours: int | None,
        progress: Progress | None,
        options: _PartsOptions,
        release: _Release,
    ) -> Flow[Build]:
        """An upload in parts: resumed from its kept state if there is one, else a new link;
        then only the parts the server lacks, `in_flight` at a time; then verify (and, for a
        build checked in the background, wait until it is ready)."""
        size, mtime_ns = yield _Local(resume.file_identity, (file,))
        kept_at = None
        if options.resume_dir is not None:
            kept_at = resume.state_file(options.resume_dir, self.base_url, project_id, app_id, file)
        state = (yield _Local(resume.load, (kept_at,))) if kept_at is not None else None
        if state is not None and (state.size, state.mtime_ns) != (size, mtime_ns):
            state = None  # the file changed: its parts are other bytes
        received = None
        resumed = state is not None
        if state is not None:
            received = yield from self._received_flow(project_id, app_id, state.build_id)
        if state is None or received is None:
            sha256 = yield _Local(file_sha256, (file,))
            link = yield from self._run_flow(
                ops.upload_link(project_id, app_id, file.name, size, sha256, multipart=True)
            )
            state = resume.UploadState(
                self.base_url, project_id, app_id, str(file), size, mtime_ns, sha256, link.build_id
            )
            if kept_at is not None:
                yield _Local(resume.save, (kept_at, state))
            received = yield from self._received_flow(project_id, app_id, link.build_id)
            if received is None:
                raise UnexpectedAnswer("the new upload in parts has no parts list")
        part_size, count = received.part_size, received.parts_count
        done = {
            p.part_number: p.size
            for p in received.parts
            if p.size == _part_bounds(p.part_number, part_size, size)[1]
        }
        tally = _Tally(size, sum(done.values()), progress)
        missing = [n for n in range(1, count + 1) if n not in done]
        attempt = 0
        while missing:
            batch = missing[:_PARTS_PER_REQUEST]
            targets_op = ops.part_targets(project_id, app_id, state.build_id, batch)
            response = yield from self._send_flow(targets_op)
            if resumed and _problem(response).get("code") == "upload_expired":
                # The kept upload outlived its link: start the file again, once.
                if kept_at is not None:
                    yield _Local(resume.forget, (kept_at,))
                return (
                    yield from self._parts_flow(
                        project_id, app_id, file, notes, install_link_hours, progress, options,
                        release,
                    )
                )  # fmt: skip
            targets = self._result(targets_op, response)
            answers = yield _PutParts(
                [
                    _Part(
                        t.part_number,
                        t.url,
                        t.headers,
                        *_part_bounds(t.part_number, part_size, size),
                    )
                    for t in targets.parts
                ],
                file,
                options.in_flight,
                tally,
            )
            arrived = [n for n, answer in answers.items() if self._part_arrived(answer)]
            missing = [n for n in missing if n not in arrived]
            if arrived:
                attempt = 0
            elif missing:
                # Nothing went through this round: wait, then ask for fresh addresses.
                delay = self._delay(attempt, None, None)
                why = f"{len(missing)} parts could not be sent to {self.base_url}"
                if delay < 0:
                    raise NetworkError(f"{why}; run the same upload again to resume it")
                yield _Sleep(delay, why, attempt + 1)
                attempt += 1
        verify = release.verify(project_id, app_id, state.build_id, notes, install_link_hours)
        build = yield from self._run_flow(verify)
        while build.status is BuildStatus.PROCESSING:
            yield _Sleep(_POLL_SECONDS)
            build = yield from self._run_flow(ops.get_build(project_id, app_id, state.build_id))
        if kept_at is not None:
            yield _Local(resume.forget, (kept_at,))
        if build.status is BuildStatus.FAILED:
            raise error_for(
                422,
                {
                    "status": 422,
                    "code": build.failure_code or "upload_refused",
                    "detail": build.metadata_error or "the server refused the uploaded file",
                },
            )
        if install_link_hours is not None and build.install_url is None:
            # Checked in the background, the build was not ready when verify could make a link.
            link_op = ops.create_install_link(
                project_id, app_id, build.build_id, install_link_hours
            )
            yield from self._run_flow(link_op)
            build = yield from self._run_flow(ops.get_build(project_id, app_id, build.build_id))
        return build

    def _received_flow(
        self, project_id: str, app_id: str, build_id: str
    ) -> Flow[ReceivedParts | None]:
        """The parts of `build_id` that arrived, or None if its upload can no longer resume
        (deleted, expired, already verified)."""
        op = ops.received_parts(project_id, app_id, build_id)
        response = yield from self._send_flow(op)
        if response.status_code in (404, 409):
            return None
        return self._result(op, response)

    def _part_arrived(self, answer: httpx.Response | httpx.TransportError) -> bool:
        """Whether a part's PUT went through; False for what a later round may fix (a broken
        connection, an expired address, a busy server), an error for the rest."""
        if isinstance(answer, httpx.TransportError):
            if not isinstance(answer, _PASSING):
                raise NetworkError(f"cannot send a part to {self.base_url}: {answer}") from answer
            return False
        if answer.is_success:
            return True
        problem = _problem(answer)
        if problem.get("code") == "url_expired" or answer.status_code in (429, 502, 503, 504):
            return False
        raise error_for(answer.status_code, problem)

    def _download_flow(
        self,
        project_id: str,
        app_id: str,
        build_id: str,
        destination: str | os.PathLike[str],
        progress: Progress | None,
    ) -> Flow[Path]:
        build = yield from self._run_flow(ops.get_build(project_id, app_id, build_id))
        target = _target(Path(destination), build)
        partial = target.with_name(f".{target.name}.part")
        attempt = 0
        try:
            while True:
                answer = yield from self._send_flow(ops.download(project_id, app_id, build_id))
                if answer.status_code != 302:  # the file's signed address, or why not
                    raise error_for(answer.status_code, _problem(answer))
                location = answer.headers["location"]
                failed = yield _Fetch(location, partial, build.file_size, progress)
                if failed is None:
                    break
                yield self._broken(failed, attempt, None, location)
                attempt += 1
            yield _Local(_check_download, (partial, build))
            partial.replace(target)
        finally:
            partial.unlink(missing_ok=True)
        return target


@dataclass(frozen=True)
class _PartsOptions:
    threshold: int
    in_flight: int
    resume_dir: Path | None


def _parts_options(
    threshold: int | None, in_flight: int, resume_dir: Path | object | None
) -> _PartsOptions | None:
    """None: never in parts. `resume_dir` left as DEFAULT: the config directory's."""
    if threshold is None:
        return None
    if in_flight < 1:
        raise ValueError("parts_in_flight must be at least 1")
    directory = default_resume_dir() if resume_dir is DEFAULT else resume_dir
    return _PartsOptions(threshold, in_flight, cast("Path | None", directory))


DEFAULT: Any = object()  # `resume_dir`'s default: the config directory's `uploads/`


def _part_bounds(number: int, part_size: int, size: int) -> tuple[int, int]:
    offset = (number - 1) * part_size
    return offset, max(0, min(part_size, size - offset))


class _Counted:
    """One part's share of a _Tally, taken back if the part does not arrive."""

    def __init__(self, tally: _Tally) -> None:
        self.tally, self.sent = tally, 0

    def add(self, count: int) -> None:
        self.sent += count
        self.tally.add(count)

    def take_back(self) -> None:
        self.tally.add(-self.sent)
        self.sent = 0


def _read_part(file: Path, part: _Part, tally: _Counted) -> Generator[bytes, None, None]:
    """One part of the file, in blocks, counted as they go."""
    with file.open("rb") as source:
        source.seek(part.offset)
        left = part.size
        while left:
            chunk = source.read(min(CHUNK, left))
            if not chunk:
                raise _changed(file)
            left -= len(chunk)
            yield chunk
            tally.add(len(chunk))


# Failures that may pass: the server restarting, a dropped connection, a timeout. Others (a
# URL without a scheme, a file that changed while it was sent) are raised at once.
_PASSING = (
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.ReadError,
    httpx.WriteError,
    httpx.ReadTimeout,
    httpx.WriteTimeout,
    httpx.PoolTimeout,
    httpx.RemoteProtocolError,
)


def _retry_after(value: str) -> float | None:
    """Retry-After as seconds: a number, or an HTTP date."""
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def _problem(response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict):
        return body
    text = re.sub(r"\s+", " ", response.text[:200]).strip()  # one line, whatever it was
    return {"status": response.status_code, "detail": text or response.reason_phrase}


def _origin(url: str) -> str:
    """Where a request went, without its path and query (a signed URL's query is a secret)."""
    parts = httpx.URL(url)
    return f"{parts.scheme}://{parts.netloc.decode('ascii')}"


def _reason(exc: httpx.TransportError) -> str:
    return str(exc) or exc.__class__.__name__


def _unresolvable(exc: httpx.TransportError) -> bool:
    """A host name the resolver does not know (socket.gaierror, under httpx's ConnectError)."""
    if not isinstance(exc, httpx.ConnectError):
        return False
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, socket.gaierror):
            return cause.errno not in _RESOLVER_BUSY
        cause = cause.__cause__ or cause.__context__
    return False


# The resolver's own trouble ("try again"), unlike an unknown name, is worth retrying.
_RESOLVER_BUSY = frozenset({socket.EAI_AGAIN})


@dataclass(frozen=True)
class _Release:
    """What verify is told besides the build: its release channels (None: the server's rule,
    `default` once the build goes to everyone), whether it is a mandatory update, and whom to
    distribute it to."""

    channels: Sequence[str] | None = None
    mandatory: bool = False
    distribute: dict[str, Any] | None = None

    def verify(
        self,
        project_id: str,
        app_id: str,
        build_id: str,
        notes: str | None,
        install_link_hours: int | None,
    ) -> Op[Build]:
        return ops.verify(
            project_id, app_id, build_id, notes, install_link_hours, self.channels,
            self.mandatory, self.distribute,
        )  # fmt: skip


def _distribution(groups: Sequence[str], emails: Sequence[str]) -> dict[str, Any] | None:
    """Verify's `distribute` object, or None when there is nothing to distribute to."""
    if not groups and not emails:
        return None
    return {"groups": list(groups), "emails": list(emails)}


def _check_notes(notes: str | None) -> None:
    """Before any byte is sent: verify would refuse them after the whole upload."""
    if notes is not None and len(notes) > MAX_NOTES_LENGTH:
        raise BuildbayClientError(
            f"notes have {len(notes)} characters; at most {MAX_NOTES_LENGTH} are accepted"
        )


def _sent(exc: httpx.TransportError) -> bool:
    """Whether the request may have reached the server (so repeating it could do it twice)."""
    return not isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout)


def _sync(op: Callable[P, Op[T]]) -> Callable[Concatenate[Buildbay, P], T]:
    def method(self: Buildbay, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self.run(op(*args, **kwargs))

    method.__doc__ = op.__doc__
    return method


def _async(
    op: Callable[P, Op[T]],
) -> Callable[Concatenate[AsyncBuildbay, P], Coroutine[Any, Any, T]]:
    async def method(self: AsyncBuildbay, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await self.run(op(*args, **kwargs))

    method.__doc__ = op.__doc__
    return method


class Buildbay(_Core):
    """The synchronous client. `Buildbay(url, token=...)`; close it, or use it with `with`."""

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        refresh_token: str | None = None,
        on_tokens: Callable[[TokenResponse], None] | None = None,
        retry: RetryPolicy | None = None,
        timeout: float = 60.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        super().__init__(base_url, token, refresh_token, on_tokens, retry)
        self._refreshing = threading.Lock()
        self._http = httpx.Client(
            timeout=httpx.Timeout(timeout, connect=10.0),
            transport=transport,
            headers={"User-Agent": f"buildbay-python/{__version__}"},
        )

    def __enter__(self) -> Buildbay:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def run(self, op: Op[T]) -> T:
        """Send one op, with the retry and refresh policy; its parsed answer."""
        return self._drive(self._run_flow(op))

    def _drive(self, flow: Flow[T]) -> T:
        answer: Any = None
        try:
            while True:
                try:
                    action = flow.send(answer)
                except StopIteration as done:
                    return cast("T", done.value)
                answer = self._do(action)
        finally:
            flow.close()  # runs the flow's own clean-up if this one is interrupted

    def _do(self, action: _Action) -> Any:
        try:
            match action:
                case _Send(request):
                    return self._http.request(**request)
                case _Put(url, headers, file, size, progress):
                    return self._http.put(
                        url, content=_read_chunks(file, size, progress), headers=headers
                    )
                case _PutParts(parts, file, in_flight, tally):
                    pool = concurrent.futures.ThreadPoolExecutor(in_flight)
                    try:
                        sent = {
                            pool.submit(self._put_part, part, file, tally): part.number
                            for part in parts
                        }
                        return {sent[f]: f.result() for f in concurrent.futures.as_completed(sent)}
                    finally:
                        # Interrupted (Ctrl-C, an error): the parts not begun are not sent.
                        pool.shutdown(wait=True, cancel_futures=True)
                case _Fetch(url, target, total, progress):
                    with self._http.stream("GET", url) as stream:
                        if stream.is_error:
                            stream.read()
                            raise error_for(stream.status_code, _problem(stream))
                        with target.open("wb") as out:
                            for chunk in stream.iter_bytes(CHUNK):
                                out.write(chunk)
                                if progress is not None:
                                    progress(out.tell(), total)
                    return None
                case _Sleep(seconds, why, attempt):
                    if why and self.retry.on_retry is not None:
                        self.retry.on_retry(why, seconds, attempt)
                    time.sleep(seconds)
                case _Refresh(sent_with):
                    with self._refreshing:
                        if self.token == sent_with:  # else another call refreshed meanwhile
                            self._took_tokens(self.run(ops.refresh(self.refresh_token or "")))
                case _Local(function, args):
                    return function(*args)
        except httpx.TransportError as exc:
            return exc
        return None

    def _put_part(
        self, part: _Part, file: Path, tally: _Tally
    ) -> httpx.Response | httpx.TransportError:
        counted = _Counted(tally)
        try:
            response = self._http.put(
                part.url,
                content=_read_part(file, part, counted),
                headers={**part.headers, "Content-Length": str(part.size)},
            )
        except httpx.TransportError as exc:
            counted.take_back()
            return exc
        if not response.is_success:
            counted.take_back()
        return response

    def login(self, email: str, password: str) -> TokenResponse:
        tokens = self.run(ops.login(email, password))
        self._took_tokens(tokens)
        return tokens

    def register(self, email: str, password: str, name: str) -> TokenResponse:
        """Create an account, and use its tokens from now on."""
        tokens = self.run(ops.register(email, password, name))
        self._took_tokens(tokens)
        return tokens

    me = _sync(ops.me)
    logout = _sync(ops.logout)
    list_api_tokens = _sync(ops.list_api_tokens)
    create_api_token = _sync(ops.create_api_token)
    revoke_api_token = _sync(ops.revoke_api_token)
    list_projects = _sync(ops.list_projects)
    create_project = _sync(ops.create_project)
    get_project = _sync(ops.get_project)
    rename_project = _sync(ops.rename_project)
    delete_project = _sync(ops.delete_project)
    list_members = _sync(ops.list_members)
    add_member = _sync(ops.add_member)
    set_member_role = _sync(ops.set_member_role)
    remove_member = _sync(ops.remove_member)
    list_webhooks = _sync(ops.list_webhooks)
    create_webhook = _sync(ops.create_webhook)
    test_webhook = _sync(ops.test_webhook)
    list_deliveries = _sync(ops.list_deliveries)
    list_applications = _sync(ops.list_applications)
    list_groups = _sync(ops.list_groups)
    create_application = _sync(ops.create_application)
    get_application = _sync(ops.get_application)
    update_application = _sync(ops.update_application)
    delete_application = _sync(ops.delete_application)
    list_channels = _sync(ops.list_channels)
    create_channel = _sync(ops.create_channel)
    list_builds = _sync(ops.list_builds)
    get_build = _sync(ops.get_build)
    latest_build = _sync(ops.latest_build)
    delete_build = _sync(ops.delete_build)
    create_install_link = _sync(ops.create_install_link)
    list_install_links = _sync(ops.list_install_links)
    revoke_install_link = _sync(ops.revoke_install_link)

    def upload_build(
        self,
        project_id: str,
        app_id: str,
        path: str | os.PathLike[str],
        *,
        notes: str | None = None,
        install_link_hours: int | None = None,
        progress: Progress | None = None,
        channels: Sequence[str] | None = None,
        mandatory: bool = False,
        distribute_to: Sequence[str] = (),
        distribute_emails: Sequence[str] = (),
        multipart_threshold: int | None = MULTIPART_THRESHOLD,
        parts_in_flight: int = PARTS_IN_FLIGHT,
        resume_dir: Path | None = DEFAULT,
    ) -> Build:
        """Upload a file and verify it: the ready build (NetworkError or ApiError otherwise).
        `channels`: the release channels to publish it to (None: `default`); `mandatory`:
        update checks that find it say the update is mandatory. `distribute_to` (tester group
        ids, `everyone` included) and `distribute_emails`: distribute it too, at verify
        (besides the application's autoDistributeGroups).

        The SHA-256 is computed in a first pass and declared at step 1, so the storage checks
        the bytes as they arrive (S3 verifies the signed checksum) and verify needs no second
        read of the stored object.

        A file larger than `multipart_threshold` bytes (None: never) goes in parts,
        `parts_in_flight` at a time. Its state is kept under `resume_dir` (by default the
        config directory's `uploads/`; None: not kept): uploading the same unchanged file to
        the same application again resumes it, sending only the parts the server lacks.
        """
        release = _Release(channels, mandatory, _distribution(distribute_to, distribute_emails))
        parts = _parts_options(multipart_threshold, parts_in_flight, resume_dir)
        return self._drive(
            self._upload_flow(
                project_id, app_id, path, notes, install_link_hours, progress, release, parts
            )
        )

    def download_build(
        self,
        project_id: str,
        app_id: str,
        build_id: str,
        destination: str | os.PathLike[str],
        *,
        progress: Progress | None = None,
    ) -> Path:
        """Save a ready build's file as `destination` (a directory: under the build's file
        name), checked against its SHA-256; nothing is left behind if it fails."""
        return self._drive(self._download_flow(project_id, app_id, build_id, destination, progress))


def _target(destination: Path, build: Build) -> Path:
    # Only the name's last part: the server does not choose where the file goes.
    return destination / Path(build.file_name).name if destination.is_dir() else destination


def _check_download(file: Path, build: Build) -> None:
    size = file.stat().st_size
    if size != build.file_size or (build.sha256 and file_sha256(file) != build.sha256):
        raise BuildbayClientError(
            f"the downloaded file does not match build {build.build_id} "
            f"({size} of {build.file_size} bytes, or another SHA-256)"
        )


def _changed(file: Path) -> BuildbayClientError:
    return BuildbayClientError(f"{file} changed while it was being sent; upload it again")


def _read_chunks(file: Path, size: int, progress: Progress | None) -> Generator[bytes, None, None]:
    """The file's first `size` bytes (its size at step 1), in blocks, reporting progress."""
    sent = 0
    if progress is not None:
        progress(0, size)
    with file.open("rb") as source:
        while sent < size:
            chunk = source.read(min(CHUNK, size - sent))
            if not chunk:
                raise _changed(file)
            sent += len(chunk)
            yield chunk
            if progress is not None:
                progress(sent, size)


async def _aread_chunks(file: Path, size: int, progress: Progress | None) -> AsyncIterator[bytes]:
    """`_read_chunks`, each block read in a worker thread."""
    blocks = _read_chunks(file, size, progress)
    try:
        while (chunk := await asyncio.to_thread(next, blocks, None)) is not None:
            yield chunk
    finally:
        blocks.close()


class AsyncBuildbay(_Core):
    """The asyncio client: the same methods as `Buildbay`, awaited."""

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        refresh_token: str | None = None,
        on_tokens: Callable[[TokenResponse], None] | None = None,
        retry: RetryPolicy | None = None,
        timeout: float = 60.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        super().__init__(base_url, token, refresh_token, on_tokens, retry)
        self._refreshing = asyncio.Lock()
        self._http = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout, connect=10.0),
            transport=transport,
            headers={"User-Agent": f"buildbay-python/{__version__}"},
        )

    async def __aenter__(self) -> AsyncBuildbay:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def run(self, op: Op[T]) -> T:
        return await self._drive(self._run_flow(op))

    async def _drive(self, flow: Flow[T]) -> T:
        answer: Any = None
        try:
            while True:
                try:
                    action = flow.send(answer)
                except StopIteration as done:
                    return cast("T", done.value)
                answer = await self._do(action)
        finally:
            flow.close()

    async def _do(self, action: _Action) -> Any:
        try:
            match action:
                case _Send(request):
                    return await self._http.request(**request)
                case _Put(url, headers, file, size, progress):
                    return await self._http.put(
                        url, content=_aread_chunks(file, size, progress), headers=headers
                    )
                case _PutParts(parts, file, in_flight, tally):
                    slots = asyncio.Semaphore(in_flight)
                    answers: dict[int, Any] = {}

                    async def one(part: _Part) -> None:
                        async with slots:
                            answers[part.number] = await self._put_part(part, file, tally)

                    # A task group: if one part raises, the others are cancelled, not left
                    # sending in the background.
                    try:
                        async with asyncio.TaskGroup() as group:
                            for part in parts:
                                group.create_task(one(part))
                    except BaseExceptionGroup as failed:
                        raise failed.exceptions[0] from None
                    return answers
                case _Fetch(url, target, total, progress):
                    async with self._http.stream("GET", url) as stream:
                        if stream.is_error:
                            await stream.aread()
                            raise error_for(stream.status_code, _problem(stream))
                        with target.open("wb") as out:
                            async for chunk in stream.aiter_bytes(CHUNK):
                                out.write(chunk)
                                if progress is not None:
                                    progress(out.tell(), total)
                    return None
                case _Sleep(seconds, why, attempt):
                    if why and self.retry.on_retry is not None:
                        self.retry.on_retry(why, seconds, attempt)
                    await asyncio.sleep(seconds)
                case _Refresh(sent_with):
                    async with self._refreshing:
                        if self.token == sent_with:  # else another task refreshed meanwhile
                            refresh = ops.refresh(self.refresh_token or "")
                            self._took_tokens(await self.run(refresh))
                case _Local(function, args):
                    return await asyncio.to_thread(function, *args)
        except httpx.TransportError as exc:
            return exc
        return None

    async def _put_part(
        self, part: _Part, file: Path, tally: _Tally
    ) -> httpx.Response | httpx.TransportError:
        counted = _Counted(tally)
        blocks = _read_part(file, part, counted)

        async def body() -> AsyncIterator[bytes]:
            try:
                while (chunk := await asyncio.to_thread(next, blocks, None)) is not None:
                    yield chunk
            finally:
                blocks.close()

        try:
            response = await self._http.put(
                part.url,
                content=body(),
                headers={**part.headers, "Content-Length": str(part.size)},
            )
        except httpx.TransportError as exc:
            counted.take_back()
            return exc
        if not response.is_success:
            counted.take_back()
        return response

    async def login(self, email: str, password: str) -> TokenResponse:
        tokens = await self.run(ops.login(email, password))
        self._took_tokens(tokens)
        return tokens

    async def register(self, email: str, password: str, name: str) -> TokenResponse:
        tokens = await self.run(ops.register(email, password, name))
        self._took_tokens(tokens)
        return tokens

    me = _async(ops.me)
    logout = _async(ops.logout)
    list_api_tokens = _async(ops.list_api_tokens)
    create_api_token = _async(ops.create_api_token)
    revoke_api_token = _async(ops.revoke_api_token)
    list_projects = _async(ops.list_projects)
    create_project = _async(ops.create_project)
    get_project = _async(ops.get_project)
    rename_project = _async(ops.rename_project)
    delete_project = _async(ops.delete_project)
    list_members = _async(ops.list_members)
    add_member = _async(ops.add_member)
    set_member_role = _async(ops.set_member_role)
    remove_member = _async(ops.remove_member)
    list_webhooks = _async(ops.list_webhooks)
    create_webhook = _async(ops.create_webhook)
    test_webhook = _async(ops.test_webhook)
    list_deliveries = _async(ops.list_deliveries)
    list_applications = _async(ops.list_applications)
    list_groups = _async(ops.list_groups)
    create_application = _async(ops.create_application)
    get_application = _async(ops.get_application)
    update_application = _async(ops.update_application)
    delete_application = _async(ops.delete_application)
    list_channels = _async(ops.list_channels)
    create_channel = _async(ops.create_channel)
    list_builds = _async(ops.list_builds)
    get_build = _async(ops.get_build)
    latest_build = _async(ops.latest_build)
    delete_build = _async(ops.delete_build)
    create_install_link = _async(ops.create_install_link)
    list_install_links = _async(ops.list_install_links)
    revoke_install_link = _async(ops.revoke_install_link)

    async def upload_build(
        self,
        project_id: str,
        app_id: str,
        path: str | os.PathLike[str],
        *,
        notes: str | None = None,
        install_link_hours: int | None = None,
        progress: Progress | None = None,
        channels: Sequence[str] | None = None,
        mandatory: bool = False,
        distribute_to: Sequence[str] = (),
        distribute_emails: Sequence[str] = (),
        multipart_threshold: int | None = MULTIPART_THRESHOLD,
        parts_in_flight: int = PARTS_IN_FLIGHT,
        resume_dir: Path | None = DEFAULT,
    ) -> Build:
        """As `Buildbay.upload_build`."""
        release = _Release(channels, mandatory, _distribution(distribute_to, distribute_emails))
        parts = _parts_options(multipart_threshold, parts_in_flight, resume_dir)
        return await self._drive(
            self._upload_flow(
                project_id, app_id, path, notes, install_link_hours, progress, release, parts
            )
        )

    async def download_build(
        self,
        project_id: str,
        app_id: str,
        build_id: str,
        destination: str | os.PathLike[str],
        *,
        progress: Progress | None = None,
    ) -> Path:
        """As `Buildbay.download_build`."""
        return await self._drive(
            self._download_flow(project_id, app_id, build_id, destination, progress)
        )


__all__ = ["ApiError", "AsyncBuildbay", "Buildbay", "NetworkError", "RetryPolicy"]

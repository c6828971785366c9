"""The SDK's flows, written once for both clients (sync_client.py, async_client.py).

Each multi-step job (a request with its retries, an upload, a download) is a generator in
`Core` that yields what it needs done (send this, sleep that long, PUT the file: the actions
below) and gets the outcome back; each client carries those actions out its own way, blocking
or awaited. See api.py for the policy."""

from __future__ import annotations

import hashlib
import os
import random
import re
import socket
import threading
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any, ParamSpec, TypeVar, cast

import httpx

from buildbay_client import ops, resume
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
    ReusedBuild,
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
    max_retry_after: float = 120.0  # a Retry-After beyond it is an answer, not retried
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
class Send:
    """One HTTP request; back comes the response, or the transport error."""

    request: dict[str, Any]


@dataclass(frozen=True)
class Put:
    """The file's first `size` bytes to an upload address; the response, or the error."""

    url: str
    headers: dict[str, str]
    file: Path
    size: int
    progress: Progress | None


@dataclass(frozen=True)
class Part:
    number: int
    url: str
    headers: dict[str, str]
    offset: int
    size: int


class Tally:
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
class PutParts:
    """PUT these parts of `file`, `in_flight` at a time; back comes each part's response or
    transport error, by part number."""

    parts: list[Part]
    file: Path
    in_flight: int
    tally: Tally


@dataclass(frozen=True)
class Fetch:
    """A GET of a signed address into `target`; None, or the transport error (an error answer
    raises)."""

    url: str
    target: Path
    total: int
    progress: Progress | None


@dataclass(frozen=True)
class Sleep:
    """Wait: before trying again, `why` (a sentence) before try number `attempt` + 1; or,
    without a why, for the server (a build checked in the background)."""

    seconds: float
    why: str = ""
    attempt: int = 0


@dataclass(frozen=True)
class Refresh:
    """Refresh the tokens under the client's lock, unless they changed since `sent_with`."""

    sent_with: str | None


@dataclass(frozen=True)
class Local:
    """Blocking local work (hashing, a stat); its result comes back."""

    function: Callable[..., Any]
    args: tuple[Any, ...]


Action = Send | Put | PutParts | Fetch | Sleep | Refresh | Local
Flow = Generator[Action, Any, T]


class Core:
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
        if op.content is not None:
            request["content"] = op.content
            headers["Content-Type"] = "application/octet-stream"
        elif op.json is not None:
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
                # Longer than we wait (an invitation cap says: tomorrow): an answer, not a
                # passing failure; trying again meanwhile would only repeat the request's work.
                return after if after <= self.retry.max_retry_after else -1
            return self.retry.backoff(attempt)
        if response.status_code in (502, 504) and (op is None or op.idempotent):
            return self.retry.backoff(attempt)
        return -1

    def _wants_refresh(self, op: Op[Any], response: httpx.Response) -> bool:
        return (
            op.authenticated
            and response.status_code == 401
            and self.refresh_token is not None
            and problem_of(response).get("code") == "token_expired"
        )

    def _took_tokens(self, tokens: TokenResponse) -> None:
        self.token, self.refresh_token = tokens.access_token, tokens.refresh_token
        if self.on_tokens is not None:
            self.on_tokens(tokens)

    def _result(self, op: Op[T], response: httpx.Response) -> T:
        if response.is_error:
            raise error_for(response.status_code, problem_of(response))
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
        problem = problem_of(response)
        if problem.get("code") == "url_expired" and attempt + 1 < self.retry.attempts:
            return "relink"
        delay = self._delay(attempt, response, None)
        if delay < 0:
            raise error_for(response.status_code, problem)
        return delay

    def _broken(
        self, exc: httpx.TransportError, attempt: int, op: Op[Any] | None, url: str
    ) -> Sleep:
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
        return Sleep(delay, f"cannot reach {where}: {_reason(exc)}", attempt + 1)

    def _answered(self, response: httpx.Response, delay: float, attempt: int) -> Sleep:
        where = _origin(str(response.request.url))
        return Sleep(delay, f"{where} answered {response.status_code}", attempt + 1)

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
            answer = yield Send(request)
            if isinstance(answer, httpx.TransportError):
                wait = self._broken(answer, attempt, op, request["url"])
            else:
                if not refreshed and self._wants_refresh(op, answer):
                    yield Refresh(sent_with)
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

    def _content_flow(self, op: Op[Any]) -> Flow[bytes]:
        """`op` sent as `_run_flow` sends it; the answer's bytes (a file the server writes)."""
        response = yield from self._send_flow(op)
        if response.is_error:
            raise error_for(response.status_code, problem_of(response))
        return response.content

    def _upload_flow(
        self,
        project_id: str,
        app_id: str,
        path: str | os.PathLike[str],
        notes: str | None,
        install_link_hours: int | None,
        progress: Progress | None,
        release: Release,
        parts: PartsOptions | None = None,
    ) -> Flow[Build]:
        _check_notes(notes)
        file = Path(path)
        size = yield Local(_size_of, (file,))
        if parts is not None and size > max(parts.threshold, _SMALLEST_IN_PARTS):
            return (
                yield from self._parts_flow(
                    project_id, app_id, file, notes, install_link_hours, progress, parts, release
                )
            )
        sha256 = yield Local(file_sha256, (file,))
        new_link = ops.upload_link(
            project_id, app_id, file.name, size, sha256, on_duplicate=release.on_duplicate
        )
        link = yield from self._link_flow(new_link)
        if isinstance(link, Build):  # already a ready build: nothing to send
            return (yield from self._reuse_flow(link, install_link_hours, release, sent=False))
        attempt = 0
        while True:
            if link.upload_url is None:
                raise UnexpectedAnswer("the upload link has no uploadUrl")
            answer = yield Put(
                link.upload_url, self._upload_headers(link, size), file, size, progress
            )
            if isinstance(answer, httpx.TransportError):
                wait = self._broken(answer, attempt, None, link.upload_url)  # same bytes again
            else:
                outcome = self._put_outcome(answer, attempt)
                if outcome == "done":
                    break
                if outcome == "relink":
                    link = yield from self._link_flow(new_link)
                    if isinstance(link, Build):  # the same bytes became ready meanwhile
                        return (
                            yield from self._reuse_flow(
                                link, install_link_hours, release, sent=False
                            )
                        )
                    attempt += 1
                    continue
                wait = self._answered(answer, float(outcome), attempt)
            yield wait
            attempt += 1
        return (
            yield from self._verify_flow(
                project_id, app_id, link.build_id, notes, install_link_hours, release
            )
        )

    def _link_flow(self, op: Op[UploadLink]) -> Flow[UploadLink | Build]:
        """An upload link; or, asked to reuse, the ready build the file already is (200)."""
        response = yield from self._send_flow(op)
        if response.status_code == 200 and op.json and op.json.get("onDuplicate") == "reuse":
            return self._result(Op(op.method, op.path, Build), response)
        return self._result(op, response)

    def _verify_flow(
        self,
        project_id: str,
        app_id: str,
        build_id: str,
        notes: str | None,
        install_link_hours: int | None,
        release: Release,
    ) -> Flow[Build]:
        """Verify; asked to reuse, a build found to be a duplicate at verify (the same file
        sent twice at once) is the ready one it repeats."""
        verify = release.verify(project_id, app_id, build_id, notes, install_link_hours)
        try:
            return (yield from self._run_flow(verify))
        except ApiError as refused:
            existing = refused.problem.get("buildId")
            if (
                release.on_duplicate != "reuse"
                or refused.code != "duplicate_build"
                or not isinstance(existing, str)
            ):
                raise
        build = yield from self._run_flow(ops.get_build(project_id, app_id, existing))
        return (yield from self._reuse_flow(build, install_link_hours, release, sent=True))

    def _reuse_flow(
        self, build: Build, install_link_hours: int | None, release: Release, *, sent: bool
    ) -> Flow[ReusedBuild]:
        """What the upload asked, applied to the ready build the file already is: verify it
        again (a ready build answers itself, with the install link and distribution asked;
        its notes stay), then add the channels asked to its own and mark it mandatory."""
        project_id, app_id, build_id = build.project_id, build.application_id, build.build_id
        again = release.verify(project_id, app_id, build_id, None, install_link_hours)
        build = yield from self._run_flow(again)
        if release.channels is not None and not set(release.channels) <= set(build.channels):
            channels = sorted({*build.channels, *release.channels})
            op = ops.set_build_channels(project_id, app_id, build_id, channels)
            build = yield from self._run_flow(op)
        if release.mandatory and not build.mandatory:
            build = yield from self._run_flow(ops.mark_mandatory(project_id, app_id, build_id))
        return ReusedBuild.of(build, sent=sent)

    def _parts_flow(
        self,
        project_id: str,
        app_id: str,
        file: Path,
        notes: str | None,
        install_link_hours: int | None,
        progress: Progress | None,
        options: PartsOptions,
        release: Release,
    ) -> Flow[Build]:
        """An upload in parts: resumed from its kept state if there is one, else a new link;
        then only the parts the server lacks, `in_flight` at a time; then verify (and, for a
        build checked in the background, wait until it is ready)."""
        size, mtime_ns = yield Local(resume.file_identity, (file,))
        kept_at = None
        if options.resume_dir is not None:
            kept_at = resume.state_file(options.resume_dir, self.base_url, project_id, app_id, file)
        state = (yield Local(resume.load, (kept_at,))) if kept_at is not None else None
        if state is not None and (state.size, state.mtime_ns) != (size, mtime_ns):
            state = None  # the file changed: its parts are other bytes
        received = None
        resumed = state is not None
        if state is not None:
            received = yield from self._received_flow(project_id, app_id, state.build_id)
        if state is None or received is None:
            sha256 = yield Local(file_sha256, (file,))
            link = yield from self._link_flow(
                ops.upload_link(
                    project_id, app_id, file.name, size, sha256, multipart=True,
                    on_duplicate=release.on_duplicate,
                )
            )  # fmt: skip
            if isinstance(link, Build):  # already a ready build: nothing to send
                return (yield from self._reuse_flow(link, install_link_hours, release, sent=False))
            state = resume.UploadState(
                self.base_url, project_id, app_id, str(file), size, mtime_ns, sha256, link.build_id
            )
            if kept_at is not None:
                yield Local(resume.save, (kept_at, state))
            received = yield from self._received_flow(project_id, app_id, link.build_id)
            if received is None:
                raise UnexpectedAnswer("the new upload in parts has no parts list")
        part_size, count = received.part_size, received.parts_count
        done = {
            p.part_number: p.size
            for p in received.parts
            if p.size == _part_bounds(p.part_number, part_size, size)[1]
        }
        tally = Tally(size, sum(done.values()), progress)
        missing = [n for n in range(1, count + 1) if n not in done]
        attempt = 0
        while missing:
            batch = missing[:_PARTS_PER_REQUEST]
            targets_op = ops.part_targets(project_id, app_id, state.build_id, batch)
            response = yield from self._send_flow(targets_op)
            if resumed and problem_of(response).get("code") == "upload_expired":
                # The kept upload outlived its link: start the file again, once.
                if kept_at is not None:
                    yield Local(resume.forget, (kept_at,))
                return (
                    yield from self._parts_flow(
                        project_id, app_id, file, notes, install_link_hours, progress, options,
                        release,
                    )
                )  # fmt: skip
            targets = self._result(targets_op, response)
            answers = yield PutParts(
                [
                    Part(
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
                yield Sleep(delay, why, attempt + 1)
                attempt += 1
        build = yield from self._verify_flow(
            project_id, app_id, state.build_id, notes, install_link_hours, release
        )
        if isinstance(build, ReusedBuild):
            if kept_at is not None:
                yield Local(resume.forget, (kept_at,))
            return build
        while build.status is BuildStatus.PROCESSING:
            yield Sleep(_POLL_SECONDS)
            build = yield from self._run_flow(ops.get_build(project_id, app_id, state.build_id))
        if kept_at is not None:
            yield Local(resume.forget, (kept_at,))
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
        problem = problem_of(answer)
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
                    raise error_for(answer.status_code, problem_of(answer))
                location = answer.headers["location"]
                failed = yield Fetch(location, partial, build.file_size, progress)
                if failed is None:
                    break
                yield self._broken(failed, attempt, None, location)
                attempt += 1
            yield Local(_check_download, (partial, build))
            partial.replace(target)
        finally:
            partial.unlink(missing_ok=True)
        return target


@dataclass(frozen=True)
class PartsOptions:
    threshold: int
    in_flight: int
    resume_dir: Path | None


def parts_options(
    threshold: int | None, in_flight: int, resume_dir: Path | object | None
) -> PartsOptions | None:
    """None: never in parts. `resume_dir` left as DEFAULT: the config directory's."""
    if threshold is None:
        return None
    if in_flight < 1:
        raise ValueError("parts_in_flight must be at least 1")
    directory = default_resume_dir() if resume_dir is DEFAULT else resume_dir
    return PartsOptions(threshold, in_flight, cast("Path | None", directory))


DEFAULT: Any = object()  # `resume_dir`'s default: the config directory's `uploads/`


def _part_bounds(number: int, part_size: int, size: int) -> tuple[int, int]:
    offset = (number - 1) * part_size
    return offset, max(0, min(part_size, size - offset))


class Counted:
    """One part's share of a Tally, taken back if the part does not arrive."""

    def __init__(self, tally: Tally) -> None:
        self.tally, self.sent = tally, 0

    def add(self, count: int) -> None:
        self.sent += count
        self.tally.add(count)

    def take_back(self) -> None:
        self.tally.add(-self.sent)
        self.sent = 0


def read_part(file: Path, part: Part, tally: Counted) -> Generator[bytes, None, None]:
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


def problem_of(response: httpx.Response) -> dict[str, Any]:
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
class Release:
    """What verify is told besides the build: its release channels (None: the server's rule,
    `default` once the build goes to everyone), whether it is a mandatory update, and whom to
    distribute it to."""

    channels: Sequence[str] | None = None
    mandatory: bool = False
    distribute: dict[str, Any] | None = None
    # What upload-link answers for a file that is already a ready build of the application:
    # "reuse" (that build, with the above applied to it) or "refuse" (409 duplicate_build).
    on_duplicate: str = "reuse"
    # What the desktop updaters need that only CI knows (verify's architecture,
    # sparkleEdSignature, minimumOsVersion), by ops.verify's keyword; None left out.
    updater: dict[str, str | None] = field(default_factory=dict)

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
            self.mandatory, self.distribute, **self.updater,
        )  # fmt: skip


def distribution_of(groups: Sequence[str], emails: Sequence[str]) -> dict[str, Any] | None:
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


def read_chunks(file: Path, size: int, progress: Progress | None) -> Generator[bytes, None, None]:
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

"""The Python SDK: `Buildbay` (synchronous) and `AsyncBuildbay` (asyncio), over httpx.

Both run the same ops (client/ops.py) with the same policy:

- errors come back as typed exceptions (client/errors.py) carrying the problem+json answer;
- 429 waits for Retry-After, 503 and a connection that could not be opened are retried with
  exponential backoff; a connection that broke after the request was sent is retried only for
  an idempotent step (never a second upload link or a second project);
- an expired access token is refreshed with the refresh token, once, and the new pair handed to
  `on_tokens` (the CLI saves it);
- `upload_build` runs the three steps, streams the file from disk (memory stays flat whatever
  its size), declares its SHA-256, retries the PUT when the connection breaks or the server is
  restarting, and answers the ready build.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import random
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

import httpx

from buildbay import __version__
from buildbay.auth import schemas as auth
from buildbay.builds import schemas as builds
from buildbay.client import ops
from buildbay.client.errors import ApiError, NetworkError, error_for
from buildbay.client.ops import Op

P = ParamSpec("P")
T = TypeVar("T")

CHUNK = 1024 * 1024
Progress = Callable[[int, int], None]  # (bytes sent, total bytes)


@dataclass
class RetryPolicy:
    attempts: int = 6  # tries of one step in all
    base_delay: float = 0.5
    max_delay: float = 15.0
    max_retry_after: float = 120.0

    def backoff(self, attempt: int) -> float:
        """Exponential, with jitter so that many CI jobs do not retry in step."""
        jitter = random.uniform(0.5, 1.0)  # noqa: S311  (spreading retries, not a secret)
        return min(self.max_delay, self.base_delay * 2.0**attempt) * jitter


def file_sha256(path: Path) -> str:
    with path.open("rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()


class _Core:
    """What both clients share: addresses, tokens, and how an answer becomes a result or an
    error or a retry."""

    def __init__(
        self,
        base_url: str,
        token: str | None,
        refresh_token: str | None,
        on_tokens: Callable[[auth.TokenResponse], None] | None,
        retry: RetryPolicy | None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.refresh_token = refresh_token
        self.on_tokens = on_tokens
        self.retry = retry or RetryPolicy()

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
            after = response.headers.get("retry-after", "")
            if after.isdigit():
                return min(float(after), self.retry.max_retry_after)
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

    def _took_tokens(self, tokens: auth.TokenResponse) -> None:
        self.token, self.refresh_token = tokens.access_token, tokens.refresh_token
        if self.on_tokens is not None:
            self.on_tokens(tokens)

    def _result(self, op: Op[T], response: httpx.Response) -> T:
        if response.is_error:
            raise error_for(response.status_code, _problem(response))
        if op.model is None:
            return None  # type: ignore[return-value]
        return op.parse(response.json())

    def _upload_headers(self, link: builds.UploadLink, size: int) -> dict[str, str]:
        # Never the Authorization header: the signed URL is the credential, and with S3 storage
        # it is another host.
        return {**link.upload_headers, "Content-Length": str(size)}


def _problem(response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict):
        return body
    return {"status": response.status_code, "detail": response.text[:200] or response.reason_phrase}


def _unreachable(exc: httpx.TransportError) -> NetworkError:
    return NetworkError(f"cannot reach the server: {exc.__class__.__name__}: {exc}")


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
        on_tokens: Callable[[auth.TokenResponse], None] | None = None,
        retry: RetryPolicy | None = None,
        timeout: float = 60.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        super().__init__(base_url, token, refresh_token, on_tokens, retry)
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
        return self._result(op, self._send(op))

    def _send(self, op: Op[Any]) -> httpx.Response:
        refreshed = False
        attempt = 0
        while True:
            try:
                response = self._http.request(**self._request(op))
            except httpx.TransportError as exc:
                delay = self._delay(attempt, None, op if _sent(exc) else None)
                if delay < 0:
                    raise _unreachable(exc) from exc
            else:
                if not refreshed and self._wants_refresh(op, response):
                    self._took_tokens(self.run(ops.refresh(self.refresh_token or "")))
                    refreshed = True
                    continue
                delay = self._delay(attempt, response, op) if response.is_error else -1
                if delay < 0:
                    return response
            time.sleep(delay)
            attempt += 1

    def login(self, email: str, password: str) -> auth.TokenResponse:
        tokens = self.run(ops.login(email, password))
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
    list_applications = _sync(ops.list_applications)
    create_application = _sync(ops.create_application)
    get_application = _sync(ops.get_application)
    update_application = _sync(ops.update_application)
    delete_application = _sync(ops.delete_application)
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
    ) -> builds.Build:
        """Upload a file and verify it: the ready build (NetworkError or ApiError otherwise)."""
        file = Path(path)
        size, sha256 = file.stat().st_size, file_sha256(file)
        link = self.run(ops.upload_link(project_id, app_id, file.name, size, sha256))
        attempt = 0
        while True:
            try:
                response = self._http.put(
                    link.upload_url,
                    content=_read_chunks(file, size, progress),
                    headers=self._upload_headers(link, size),
                )
            except httpx.TransportError as exc:
                delay = self._delay(attempt, None, None)  # a PUT of the same bytes is idempotent
                if delay < 0:
                    raise _unreachable(exc) from exc
            else:
                if response.is_success:
                    break
                if _problem(response).get("code") == "url_expired":
                    link = self.run(ops.upload_link(project_id, app_id, file.name, size, sha256))
                    continue
                delay = self._delay(attempt, response, None)
                if delay < 0:
                    raise error_for(response.status_code, _problem(response))
            time.sleep(delay)
            attempt += 1
        return self.run(ops.verify(project_id, app_id, link.build_id, notes, install_link_hours))

    def download_build(
        self,
        project_id: str,
        app_id: str,
        build_id: str,
        destination: str | os.PathLike[str],
        *,
        progress: Progress | None = None,
    ) -> Path:
        """Save a ready build's file as `destination` (a directory: under the build's name)."""
        build = self.run(ops.get_build(project_id, app_id, build_id))
        target = _target(Path(destination), build)
        answer = self._send(ops.download(project_id, app_id, build_id))  # 302 to a signed URL
        if answer.status_code != 302:
            raise error_for(answer.status_code, _problem(answer))
        partial = target.with_name(target.name + ".part")
        with self._http.stream("GET", answer.headers["location"]) as stream:
            if stream.is_error:
                stream.read()
                raise error_for(stream.status_code, _problem(stream))
            with partial.open("wb") as out:
                for chunk in stream.iter_bytes(CHUNK):
                    out.write(chunk)
                    if progress is not None:
                        progress(out.tell(), build.file_size)
        partial.replace(target)
        return target


def _target(destination: Path, build: builds.Build) -> Path:
    return destination / build.file_name if destination.is_dir() else destination


def _read_chunks(file: Path, size: int, progress: Progress | None) -> Iterator[bytes]:
    sent = 0
    if progress is not None:
        progress(0, size)
    with file.open("rb") as source:
        while chunk := source.read(CHUNK):
            sent += len(chunk)
            yield chunk
            if progress is not None:
                progress(sent, size)


async def _aread_chunks(file: Path, size: int, progress: Progress | None) -> AsyncIterator[bytes]:
    sent = 0
    if progress is not None:
        progress(0, size)
    with file.open("rb") as source:
        while chunk := await asyncio.to_thread(source.read, CHUNK):
            sent += len(chunk)
            yield chunk
            if progress is not None:
                progress(sent, size)


class AsyncBuildbay(_Core):
    """The asyncio client: the same methods as `Buildbay`, awaited."""

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        refresh_token: str | None = None,
        on_tokens: Callable[[auth.TokenResponse], None] | None = None,
        retry: RetryPolicy | None = None,
        timeout: float = 60.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        super().__init__(base_url, token, refresh_token, on_tokens, retry)
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
        return self._result(op, await self._send(op))

    async def _send(self, op: Op[Any]) -> httpx.Response:
        refreshed = False
        attempt = 0
        while True:
            try:
                response = await self._http.request(**self._request(op))
            except httpx.TransportError as exc:
                delay = self._delay(attempt, None, op if _sent(exc) else None)
                if delay < 0:
                    raise _unreachable(exc) from exc
            else:
                if not refreshed and self._wants_refresh(op, response):
                    self._took_tokens(await self.run(ops.refresh(self.refresh_token or "")))
                    refreshed = True
                    continue
                delay = self._delay(attempt, response, op) if response.is_error else -1
                if delay < 0:
                    return response
            await asyncio.sleep(delay)
            attempt += 1

    async def login(self, email: str, password: str) -> auth.TokenResponse:
        tokens = await self.run(ops.login(email, password))
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
    list_applications = _async(ops.list_applications)
    create_application = _async(ops.create_application)
    get_application = _async(ops.get_application)
    update_application = _async(ops.update_application)
    delete_application = _async(ops.delete_application)
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
    ) -> builds.Build:
        file = Path(path)
        size = (await asyncio.to_thread(file.stat)).st_size
        sha256 = await asyncio.to_thread(file_sha256, file)
        link = await self.run(ops.upload_link(project_id, app_id, file.name, size, sha256))
        attempt = 0
        while True:
            try:
                response = await self._http.put(
                    link.upload_url,
                    content=_aread_chunks(file, size, progress),
                    headers=self._upload_headers(link, size),
                )
            except httpx.TransportError as exc:
                delay = self._delay(attempt, None, None)
                if delay < 0:
                    raise _unreachable(exc) from exc
            else:
                if response.is_success:
                    break
                if _problem(response).get("code") == "url_expired":
                    link = await self.run(
                        ops.upload_link(project_id, app_id, file.name, size, sha256)
                    )
                    continue
                delay = self._delay(attempt, response, None)
                if delay < 0:
                    raise error_for(response.status_code, _problem(response))
            await asyncio.sleep(delay)
            attempt += 1
        return await self.run(
            ops.verify(project_id, app_id, link.build_id, notes, install_link_hours)
        )


__all__ = ["ApiError", "AsyncBuildbay", "Buildbay", "NetworkError", "RetryPolicy"]

"""The asyncio client: `AsyncBuildbay`, which carries out the flows (flows.py) awaited."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any, Concatenate, Literal, ParamSpec, TypeVar, cast

import httpx

from buildbay_client import __version__, ops
from buildbay_client.errors import (
    error_for,
)
from buildbay_client.flows import (
    CHUNK,
    DEFAULT,
    MULTIPART_THRESHOLD,
    PARTS_IN_FLIGHT,
    Action,
    Core,
    Counted,
    Fetch,
    Flow,
    Local,
    Part,
    Progress,
    Put,
    PutParts,
    Refresh,
    Release,
    RetryPolicy,
    Send,
    Sleep,
    Tally,
    distribution_of,
    parts_options,
    problem_of,
    read_chunks,
    read_part,
    source_of,
)
from buildbay_client.models import (
    Build,
    TokenResponse,
)
from buildbay_client.ops import Op
from buildbay_client.source import BuildSource

P = ParamSpec("P")
T = TypeVar("T")


def _async(
    op: Callable[P, Op[T]],
) -> Callable[Concatenate[AsyncBuildbay, P], Coroutine[Any, Any, T]]:
    async def method(self: AsyncBuildbay, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await self.run(op(*args, **kwargs))

    method.__doc__ = op.__doc__
    return method


async def _aread_chunks(file: Path, size: int, progress: Progress | None) -> AsyncIterator[bytes]:
    """`read_chunks`, each block read in a worker thread."""
    blocks = read_chunks(file, size, progress)
    try:
        while (chunk := await asyncio.to_thread(next, blocks, None)) is not None:
            yield chunk
    finally:
        blocks.close()


class AsyncBuildbay(Core):
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

    async def _do(self, action: Action) -> Any:
        try:
            match action:
                case Send(request):
                    return await self._http.request(**request)
                case Put(url, headers, file, size, progress):
                    return await self._http.put(
                        url, content=_aread_chunks(file, size, progress), headers=headers
                    )
                case PutParts(parts, file, in_flight, tally):
                    slots = asyncio.Semaphore(in_flight)
                    answers: dict[int, Any] = {}

                    async def one(part: Part) -> None:
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
                case Fetch(url, target, total, progress):
                    async with self._http.stream("GET", url) as stream:
                        if stream.is_error:
                            await stream.aread()
                            raise error_for(stream.status_code, problem_of(stream))
                        with target.open("wb") as out:
                            async for chunk in stream.aiter_bytes(CHUNK):
                                out.write(chunk)
                                if progress is not None:
                                    progress(out.tell(), total)
                    return None
                case Sleep(seconds, why, attempt):
                    if why and self.retry.on_retry is not None:
                        self.retry.on_retry(why, seconds, attempt)
                    await asyncio.sleep(seconds)
                case Refresh(sent_with):
                    async with self._refreshing:
                        if self.token == sent_with:  # else another task refreshed meanwhile
                            refresh = ops.refresh(self.refresh_token or "")
                            self._took_tokens(await self.run(refresh))
                case Local(function, args):
                    return await asyncio.to_thread(function, *args)
        except httpx.TransportError as exc:
            return exc
        return None

    async def _put_part(
        self, part: Part, file: Path, tally: Tally
    ) -> httpx.Response | httpx.TransportError:
        counted = Counted(tally)
        blocks = read_part(file, part, counted)

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

    cli_token = _async(ops.cli_token)
    device_code = _async(ops.device_code)
    device_token = _async(ops.device_token)
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
    set_webhook_enabled = _async(ops.set_webhook_enabled)
    delete_webhook = _async(ops.delete_webhook)
    retry_delivery = _async(ops.retry_delivery)
    list_applications = _async(ops.list_applications)
    list_groups = _async(ops.list_groups)
    list_project_devices = _async(ops.list_project_devices)
    create_application = _async(ops.create_application)
    get_application = _async(ops.get_application)
    update_application = _async(ops.update_application)
    preview_retention = _async(ops.preview_retention)
    delete_application = _async(ops.delete_application)
    list_channels = _async(ops.list_channels)
    create_channel = _async(ops.create_channel)
    list_builds = _async(ops.list_builds)
    get_build = _async(ops.get_build)
    latest_build = _async(ops.latest_build)
    delete_build = _async(ops.delete_build)
    set_build_channels = _async(ops.set_build_channels)
    attach_blockmap = _async(ops.attach_blockmap)
    mark_mandatory = _async(ops.mark_mandatory)
    distribute_build = _async(ops.distribute_build)
    create_install_link = _async(ops.create_install_link)
    list_install_links = _async(ops.list_install_links)
    revoke_install_link = _async(ops.revoke_install_link)
    list_feedback = _async(ops.list_feedback)
    get_feedback = _async(ops.get_feedback)
    update_feedback = _async(ops.update_feedback)
    list_feedback_comments = _async(ops.list_feedback_comments)
    comment_on_feedback = _async(ops.comment_on_feedback)
    own_feedback = _async(ops.own_feedback)

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
        on_duplicate: Literal["reuse", "refuse"] = "reuse",
        architecture: str | None = None,
        sparkle_ed_signature: str | None = None,
        minimum_os_version: str | None = None,
        source: BuildSource | dict[str, Any] | None = DEFAULT,
    ) -> Build:
        """As `Buildbay.upload_build`."""
        updater = {
            "architecture": architecture,
            "sparkle_ed_signature": sparkle_ed_signature,
            "minimum_os_version": minimum_os_version,
        }
        release = Release(
            channels, mandatory, distribution_of(distribute_to, distribute_emails), on_duplicate,
            updater,
            source_of(source),
        )  # fmt: skip
        parts = parts_options(multipart_threshold, parts_in_flight, resume_dir)
        return await self._drive(
            self._upload_flow(
                project_id, app_id, path, notes, install_link_hours, progress, release, parts
            )
        )

    async def export_devices(self, project_id: str, format: str = "apple") -> bytes:  # noqa: A002
        """As `Buildbay.export_devices`."""
        return await self._drive(self._content_flow(ops.export_devices(project_id, format)))

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

"""The synchronous client: `Buildbay`, which carries out the flows (flows.py) blocking."""

from __future__ import annotations

import concurrent.futures
import os
import threading
import time
from collections.abc import Callable, Sequence
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


def _sync(op: Callable[P, Op[T]]) -> Callable[Concatenate[Buildbay, P], T]:
    def method(self: Buildbay, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self.run(op(*args, **kwargs))

    method.__doc__ = op.__doc__
    return method


class Buildbay(Core):
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

    def _do(self, action: Action) -> Any:
        try:
            match action:
                case Send(request):
                    return self._http.request(**request)
                case Put(url, headers, file, size, progress):
                    return self._http.put(
                        url, content=read_chunks(file, size, progress), headers=headers
                    )
                case PutParts(parts, file, in_flight, tally):
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
                case Fetch(url, target, total, progress):
                    with self._http.stream("GET", url) as stream:
                        if stream.is_error:
                            stream.read()
                            raise error_for(stream.status_code, problem_of(stream))
                        with target.open("wb") as out:
                            for chunk in stream.iter_bytes(CHUNK):
                                out.write(chunk)
                                if progress is not None:
                                    progress(out.tell(), total)
                    return None
                case Sleep(seconds, why, attempt):
                    if why and self.retry.on_retry is not None:
                        self.retry.on_retry(why, seconds, attempt)
                    time.sleep(seconds)
                case Refresh(sent_with):
                    with self._refreshing:
                        if self.token == sent_with:  # else another call refreshed meanwhile
                            self._took_tokens(self.run(ops.refresh(self.refresh_token or "")))
                case Local(function, args):
                    return function(*args)
        except httpx.TransportError as exc:
            return exc
        return None

    def _put_part(
        self, part: Part, file: Path, tally: Tally
    ) -> httpx.Response | httpx.TransportError:
        counted = Counted(tally)
        try:
            response = self._http.put(
                part.url,
                content=read_part(file, part, counted),
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

    cli_token = _sync(ops.cli_token)
    device_code = _sync(ops.device_code)
    device_token = _sync(ops.device_token)
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
    set_webhook_enabled = _sync(ops.set_webhook_enabled)
    delete_webhook = _sync(ops.delete_webhook)
    retry_delivery = _sync(ops.retry_delivery)
    list_applications = _sync(ops.list_applications)
    list_groups = _sync(ops.list_groups)
    list_project_devices = _sync(ops.list_project_devices)
    create_application = _sync(ops.create_application)
    get_application = _sync(ops.get_application)
    update_application = _sync(ops.update_application)
    preview_retention = _sync(ops.preview_retention)
    delete_application = _sync(ops.delete_application)
    list_channels = _sync(ops.list_channels)
    create_channel = _sync(ops.create_channel)
    list_builds = _sync(ops.list_builds)
    get_build = _sync(ops.get_build)
    latest_build = _sync(ops.latest_build)
    delete_build = _sync(ops.delete_build)
    set_build_channels = _sync(ops.set_build_channels)
    attach_blockmap = _sync(ops.attach_blockmap)
    mark_mandatory = _sync(ops.mark_mandatory)
    distribute_build = _sync(ops.distribute_build)
    create_install_link = _sync(ops.create_install_link)
    list_install_links = _sync(ops.list_install_links)
    revoke_install_link = _sync(ops.revoke_install_link)
    list_feedback = _sync(ops.list_feedback)
    get_feedback = _sync(ops.get_feedback)
    update_feedback = _sync(ops.update_feedback)
    list_feedback_comments = _sync(ops.list_feedback_comments)
    comment_on_feedback = _sync(ops.comment_on_feedback)
    own_feedback = _sync(ops.own_feedback)

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
        on_duplicate: Literal["reuse", "refuse"] = "reuse",
        architecture: str | None = None,
        sparkle_ed_signature: str | None = None,
        minimum_os_version: str | None = None,
        source: BuildSource | dict[str, Any] | None = DEFAULT,
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

        A file that is already a ready build of the application (the same SHA-256) is that
        build: with `on_duplicate` "reuse" (the default) nothing is sent, and a `ReusedBuild`
        is answered, with the distribution, channels, mandatory flag and install link asked
        applied to it (its notes stay); with "refuse", a ConflictError `duplicate_build`.

        For a desktop application's build: `architecture` (`x64`, `arm64`, `universal`),
        `sparkle_ed_signature` (what Sparkle's `sign_update` printed) and `minimum_os_version`
        (for a file that does not say it), as verify takes them.
        `source`: where the build came from, as verify's `source` (docs/ci.md). Left out, it
        is found as `buildbay upload` finds it (the CI's variables, then the git checkout of
        the working directory, without what the server would refuse); None sends none; a
        `BuildSource` (buildbay_client.source) or its JSON is sent as it is.
        """
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
        return self._drive(
            self._upload_flow(
                project_id, app_id, path, notes, install_link_hours, progress, release, parts
            )
        )

    def export_devices(self, project_id: str, format: str = "apple") -> bytes:  # noqa: A002
        """The devices the project's members enrolled, as a file: `apple`, the tab-separated
        file Apple's Register Multiple Devices upload takes, or `csv` (developer+)."""
        return self._drive(self._content_flow(ops.export_devices(project_id, format)))

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

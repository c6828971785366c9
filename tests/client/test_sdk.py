"""The Python SDK: the async client against the app itself, token refresh with the injected
clock, typed errors, and the retry policy against scripted answers."""

from __future__ import annotations

import asyncio
import hashlib
import json
import sys
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from buildbay.clock import FrozenClock
from buildbay_client import (
    ApiError,
    AsyncBuildbay,
    Buildbay,
    BuildbayClientError,
    ConflictError,
    LimitError,
    NetworkError,
    NotFoundError,
    PermissionDenied,
    RetryPolicy,
    ServerError,
    UnexpectedAnswer,
    ops,
)
from buildbay_client.models import Build, ReusedBuild
from tests.builds.android_files import APK
from tests.conftest import BASE_URL, Account, S3Server
from tests.processes import free_port, running

FAST = RetryPolicy(attempts=4, base_delay=0.0, max_delay=0.0)


@pytest.fixture
def sdk(app: FastAPI, owner: Account) -> AsyncBuildbay:
    return AsyncBuildbay(
        BASE_URL, owner.access_token, transport=httpx.ASGITransport(app=app), retry=FAST
    )


async def test_upload_build_runs_the_three_steps_and_answers_the_ready_build(
    sdk: AsyncBuildbay, tmp_path: Path
) -> None:
    project = await sdk.create_project("Acme")
    app = await sdk.create_application(project.id, "Acme Android")
    seen: list[tuple[int, int]] = []

    build = await sdk.upload_build(
        project.id, app.id, APK, notes="first", install_link_hours=1,
        progress=lambda done, total: seen.append((done, total)),
    )  # fmt: skip

    assert build.status.value == "ready"
    assert build.sha256 == hashlib.sha256(APK.read_bytes()).hexdigest()
    assert build.metadata is not None
    assert build.metadata["versionCode"] == 42
    assert build.install_url is not None
    assert seen[0] == (0, APK.stat().st_size)
    assert seen[-1] == (APK.stat().st_size, APK.stat().st_size)
    latest = await sdk.latest_build(project.id, app.id)
    assert latest.build_id == build.build_id
    links = await sdk.list_install_links(project.id, app.id, build.build_id)
    assert [link.url for link in links.install_links] == [build.install_url]
    await sdk.aclose()


async def test_errors_are_typed_with_the_problem(sdk: AsyncBuildbay) -> None:
    project = await sdk.create_project("Acme")
    app = await sdk.create_application(project.id, "Acme Android")
    with pytest.raises(NotFoundError) as missing:
        await sdk.get_build(project.id, app.id, "bld_00000000000000000000000000")
    assert (missing.value.status, missing.value.code) == (404, "build_not_found")
    assert missing.value.request_id
    link = await sdk.run(ops.upload_link(project.id, app.id, "a.apk", 10))
    with pytest.raises(ConflictError) as pending:
        await sdk.create_install_link(project.id, app.id, link.build_id)
    assert pending.value.code == "build_not_ready"
    await sdk.aclose()


async def test_an_expired_access_token_is_refreshed_once_and_handed_over(
    app: FastAPI, owner: Account, clock: FrozenClock
) -> None:
    handed: list[str] = []
    sdk = AsyncBuildbay(
        BASE_URL,
        owner.access_token,
        refresh_token=owner.refresh_token,
        on_tokens=lambda tokens: handed.append(tokens.access_token),
        transport=httpx.ASGITransport(app=app),
        retry=FAST,
    )
    clock.advance(hours=25)  # the access token lives 24 h

    me = await sdk.me()

    assert me.email == owner.email
    assert len(handed) == 1
    assert sdk.token == handed[0] != owner.access_token
    assert sdk.refresh_token != owner.refresh_token  # rotated
    await sdk.aclose()


def _scripted(
    answers: list[httpx.Response | type[Exception]], calls: list[httpx.Request]
) -> httpx.MockTransport:
    """A server that answers each request with the next scripted answer (or raises it)."""

    def handle(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        answer = answers.pop(0)
        if isinstance(answer, httpx.Response):
            return answer
        raise answer("scripted", request=request)  # type: ignore[call-arg]

    return httpx.MockTransport(handle)


def _client(
    answers: list[httpx.Response | type[Exception]],
) -> tuple[Buildbay, list[httpx.Request]]:
    calls: list[httpx.Request] = []
    client = Buildbay("http://server.test", "tok", retry=FAST, transport=_scripted(answers, calls))
    return client, calls


PROJECT = {
    "id": "prj_1", "name": "Acme", "applicationsCount": 0,
    "createdAt": "2026-11-22T00:00:00Z", "updatedAt": "2026-11-22T00:00:00Z",
}  # fmt: skip


def _problem(status: int, code: str, **headers: str) -> httpx.Response:
    body = {"status": status, "code": code, "detail": code, "requestId": "r1"}
    return httpx.Response(status, json=body, headers=headers)


@pytest.mark.parametrize(
    "first",
    [
        lambda: _problem(429, "rate_limited", **{"Retry-After": "0"}),
        lambda: _problem(503, "database_unavailable", **{"Retry-After": "0"}),
        lambda: httpx.ConnectError,
        lambda: httpx.ReadError,  # a GET is safe to send again
    ],
)
def test_a_read_is_retried_after_a_passing_failure(first: Callable[[], object]) -> None:
    client, calls = _client([first(), httpx.Response(200, json=PROJECT)])  # type: ignore[list-item]
    assert client.get_project("prj_1").name == "Acme"
    assert len(calls) == 2


def test_a_create_is_not_sent_twice_when_the_connection_broke_after_sending() -> None:
    client, calls = _client([httpx.ReadError, httpx.Response(201, json=PROJECT)])
    with pytest.raises(NetworkError):
        client.create_project("Acme")
    assert len(calls) == 1


def test_a_create_is_retried_when_the_connection_never_opened() -> None:
    client, calls = _client([httpx.ConnectError, httpx.Response(201, json=PROJECT)])
    assert client.create_project("Acme").id == "prj_1"
    assert len(calls) == 2


def test_retries_end_with_the_last_error() -> None:
    client, calls = _client([_problem(503, "database_unavailable") for _ in range(4)])
    with pytest.raises(ServerError) as raised:
        client.get_project("prj_1")
    assert raised.value.code == "database_unavailable"
    assert len(calls) == FAST.attempts
    client, calls = _client([_problem(413, "quota_exceeded")])
    with pytest.raises(LimitError):
        client.create_project("Acme")
    assert len(calls) == 1  # a refusal is not retried


def test_the_upload_put_never_carries_the_token(tmp_path: Path) -> None:
    file = tmp_path / "a.apk"
    file.write_bytes(b"bytes")
    link = {
        "uploadUrl": "http://bucket.test/put?sig=1", "buildId": "bld_1",
        "expiresAt": "2026-11-22T01:00:00Z", "uploadMethod": "PUT",
        "uploadHeaders": {"Content-Type": "application/octet-stream"},
    }  # fmt: skip
    build = {
        "buildId": "bld_1", "projectId": "prj_1", "applicationId": "app_1", "fileName": "a.apk",
        "fileSize": 5, "sha256": hashlib.sha256(b"bytes").hexdigest(), "status": "ready",
        "notes": None, "createdAt": "2026-11-22T00:00:00Z", "verifiedAt": "2026-11-22T00:00:00Z",
        "expiresAt": "2026-11-22T01:00:00Z", "uploadedBy": "usr_1", "metadata": None,
        "metadataError": None, "downloadUrl": "http://server.test/d", "installUrl": None,
        "iconUrl": None,
    }  # fmt: skip
    client, calls = _client(
        [
            httpx.Response(201, json=link),
            httpx.ReadError,  # the PUT broke: sent again, whole
            httpx.Response(200, json={"buildId": "bld_1", "size": 5, "sha256": "x"}),
            httpx.Response(200, json=build),
        ]
    )

    assert client.upload_build("prj_1", "app_1", file).status.value == "ready"

    upload_link, put, again, verify = calls
    assert upload_link.read().find(hashlib.sha256(b"bytes").hexdigest().encode()) > 0
    assert put.url.host == again.url.host == "bucket.test"
    assert "authorization" not in put.headers
    assert again.content == b"bytes"
    assert verify.headers["authorization"] == "Bearer tok"


def test_retry_after_is_waited_for_as_the_server_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    waited: list[float] = []
    monkeypatch.setattr("buildbay_client.sync_client.time.sleep", waited.append)
    client, _ = _client(
        [
            _problem(429, "rate_limited", **{"Retry-After": "7"}),
            _problem(
                503, "database_unavailable", **{"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}
            ),
            httpx.Response(200, json=PROJECT),
        ]
    )
    client.get_project("prj_1")
    assert waited == [7.0, 0.0]  # a date in the past: at once


def test_a_429_that_asks_to_wait_past_max_retry_after_is_an_answer_not_retried(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An invitation cap answers 429 with Retry-After until the next UTC day, after the
    request's writes (a verify and its distribution) stood: waiting minutes and sending it
    again would only repeat them."""
    waited: list[float] = []
    monkeypatch.setattr("buildbay_client.sync_client.time.sleep", waited.append)
    client, calls = _client(
        [_problem(429, "invitation_limit", **{"Retry-After": "50000"}), httpx.Response(200)]
    )
    with pytest.raises(ApiError) as raised:
        client.get_project("prj_1")
    assert (raised.value.status, raised.value.code) == (429, "invitation_limit")
    assert (len(calls), waited) == (1, [])


async def test_concurrent_calls_refresh_an_expired_token_once(
    app: FastAPI, owner: Account, clock: FrozenClock
) -> None:
    refreshed: list[str] = []
    sdk = AsyncBuildbay(
        BASE_URL, owner.access_token, refresh_token=owner.refresh_token,
        on_tokens=lambda tokens: refreshed.append(tokens.access_token),
        transport=httpx.ASGITransport(app=app), retry=FAST,
    )  # fmt: skip
    clock.advance(hours=25)

    answers = await asyncio.gather(*(sdk.me() for _ in range(5)))

    assert {me.email for me in answers} == {owner.email}
    assert len(refreshed) == 1  # a second use of the refresh token would end the session
    await sdk.aclose()


def test_an_upload_address_that_keeps_expiring_is_not_retried_forever(tmp_path: Path) -> None:
    file = tmp_path / "a.apk"
    file.write_bytes(b"bytes")
    link = {
        "uploadUrl": "http://bucket.test/put", "buildId": "bld_1",
        "expiresAt": "2026-11-22T01:00:00Z", "uploadHeaders": {},
    }  # fmt: skip
    answers: list[httpx.Response | type[Exception]] = []
    for _ in range(FAST.attempts):
        answers += [httpx.Response(201, json=link), _problem(403, "url_expired")]
    client, calls = _client(answers)
    with pytest.raises(PermissionDenied):
        client.upload_build("prj_1", "app_1", file)
    assert len(calls) == 2 * FAST.attempts


def test_a_file_that_changes_while_it_is_sent_is_an_error(tmp_path: Path) -> None:
    file = tmp_path / "a.apk"
    file.write_bytes(b"0123456789")
    link = {
        "uploadUrl": "http://bucket.test/put", "buildId": "bld_1",
        "expiresAt": "2026-11-22T01:00:00Z", "uploadHeaders": {},
    }  # fmt: skip

    def shrink_then_answer(request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            file.write_bytes(b"01234")  # truncated after step 1 measured it
            return httpx.Response(201, json=link)
        request.read()
        return httpx.Response(200, json={})

    client = Buildbay("http://server.test", "tok", retry=FAST,
                      transport=httpx.MockTransport(shrink_then_answer))  # fmt: skip
    with pytest.raises(BuildbayClientError, match="changed while it was being sent"):
        client.upload_build("prj_1", "app_1", file)


async def test_the_async_client_downloads_and_checks_a_build(
    sdk: AsyncBuildbay, tmp_path: Path
) -> None:
    project = await sdk.create_project("Acme")
    app = await sdk.create_application(project.id, "Acme Android")
    build = await sdk.upload_build(project.id, app.id, APK)

    downloads = tmp_path / "downloads"
    downloads.mkdir()

    saved = await sdk.download_build(project.id, app.id, build.build_id, downloads)

    assert saved == downloads / APK.name
    assert saved.read_bytes() == APK.read_bytes()
    assert sorted(downloads.iterdir()) == [saved]  # no partial file left
    await sdk.aclose()


def test_an_answer_of_another_shape_is_an_error_that_names_the_field() -> None:
    renamed = {k: v for k, v in PROJECT.items() if k != "applicationsCount"}
    client, _ = _client([httpx.Response(200, json=renamed)])
    with pytest.raises(UnexpectedAnswer, match=r"Project\.applicationsCount is missing"):
        client.get_project("prj_1")
    client, _ = _client([httpx.Response(200, json={**PROJECT, "applicationsCount": "2"})])
    with pytest.raises(UnexpectedAnswer, match=r"Project\.applicationsCount should be a whole"):
        client.get_project("prj_1")
    client, _ = _client([httpx.Response(200, text="<html>a proxy's page</html>")])
    with pytest.raises(UnexpectedAnswer, match="not JSON"):
        client.get_project("prj_1")


async def test_a_model_writes_back_the_json_the_server_sent(
    sdk: AsyncBuildbay, app: FastAPI
) -> None:
    """What `--json` prints: the server's own field names and values, a newer server's extra
    fields left out."""
    project = await sdk.create_project("Acme")
    application = await sdk.create_application(project.id, "Acme Android")
    build = await sdk.upload_build(project.id, application.id, APK, install_link_hours=1)
    path = f"/api/app-distribution/{project.id}/{application.id}/builds/{build.build_id}"
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as http:
        raw = (await http.get(path, headers={"Authorization": f"Bearer {sdk.token}"})).json()

    assert build.to_json() == raw
    assert Build.from_json({**raw, "addedLater": 1}).to_json() == raw
    await sdk.aclose()


class RivalFirst(httpx.ASGITransport):
    """The app, where another upload of the same file is verified just before this one."""

    def __init__(self, app: FastAPI, rival: httpx.Request) -> None:
        super().__init__(app=app)
        self.rival: httpx.Request | None = rival

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/builds/verify") and self.rival is not None:
            rival, self.rival = self.rival, None
            r = await super().handle_async_request(rival)
            assert r.status_code == 200, await r.aread()
        return await super().handle_async_request(request)


async def test_an_upload_that_loses_a_race_to_the_same_file_is_the_winners_build(
    app: FastAPI, owner: Account
) -> None:
    """Two uploads of one file at once: upload-link saw no ready build, verify finds one, and
    the build answered is that one, with what this upload asked."""
    plain = AsyncBuildbay(
        BASE_URL, owner.access_token, transport=httpx.ASGITransport(app=app), retry=FAST
    )
    project = await plain.create_project("Acme")
    application = await plain.create_application(project.id, "Acme Android")
    await plain.create_channel(project.id, application.id, "beta")
    base = f"{BASE_URL}/api/app-distribution/{project.id}/{application.id}/builds"
    headers = {"Authorization": f"Bearer {owner.access_token}"}
    data = APK.read_bytes()
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app)) as http:
        r = await http.post(
            f"{base}/upload-link",
            json={"fileName": "rival.apk", "fileSize": len(data)},
            headers=headers,
        )
        rival = r.json()
        r = await http.put(rival["uploadUrl"], content=data, headers=rival["uploadHeaders"])
        assert r.status_code == 200, r.text
    verify_rival = httpx.Request(
        "POST", f"{base}/verify", json={"buildId": rival["buildId"]}, headers=headers
    )
    sdk = AsyncBuildbay(
        BASE_URL, owner.access_token, transport=RivalFirst(app, verify_rival), retry=FAST
    )

    build = await sdk.upload_build(project.id, application.id, APK, channels=["beta"])

    assert isinstance(build, ReusedBuild)
    assert (build.build_id, build.sent) == (rival["buildId"], True)
    assert build.channels == ["beta", "default"]
    listed = await sdk.list_builds(project.id, application.id)
    assert [b.build_id for b in listed.builds] == [rival["buildId"]]
    with pytest.raises(ConflictError) as refused:
        await sdk.upload_build(project.id, application.id, APK, on_duplicate="refuse")
    assert (refused.value.code, refused.value.problem["buildId"]) == (
        "duplicate_build",
        rival["buildId"],
    )
    await sdk.aclose()
    await plain.aclose()


# -- uploads in parts -------------------------------------------------------------------------

MiB = 1024 * 1024


class CountingTransport(httpx.ASGITransport):
    """The app, noting the number of every part PUT to its storage address."""

    def __init__(self, app: FastAPI) -> None:
        super().__init__(app=app)
        self.parts: list[int] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.startswith("/storage/parts/"):
            self.parts.append(int(request.url.params["part"]))
        return await super().handle_async_request(request)


class Crash(Exception):
    """Stands for the process dying in the middle of an upload."""


def big_file(tmp_path: Path, size: int) -> Path:
    file = tmp_path / "big.bin"
    block = hashlib.sha256(b"big").digest() * (MiB // 32)
    with file.open("wb") as out:
        for i in range(size // MiB):
            out.write(i.to_bytes(4, "big") + block[4:])
        out.write(block[: size % MiB])
    return file


async def test_a_large_file_goes_in_parts_and_resumes_with_only_the_missing_ones(
    app: FastAPI, owner: Account, tmp_path: Path
) -> None:
    transport = CountingTransport(app)
    sdk = AsyncBuildbay(BASE_URL, owner.access_token, transport=transport, retry=FAST)
    project = await sdk.create_project("Acme")
    application = await sdk.create_application(project.id, "Desktop")
    file = big_file(tmp_path, 20 * MiB + 123)  # parts of 8 MiB: 1, 2 and 3
    state = tmp_path / "state"

    def crash_in_part_2(done: int, total: int) -> None:
        if done > 9 * MiB:
            raise Crash

    with pytest.raises(Crash):
        await sdk.upload_build(
            project.id, application.id, file, progress=crash_in_part_2,
            multipart_threshold=0, parts_in_flight=1, resume_dir=state,
        )  # fmt: skip
    assert len(list(state.iterdir())) == 1
    at_crash = list(transport.parts)
    await asyncio.sleep(0.2)
    assert transport.parts == at_crash  # nothing goes on sending behind the caller's back
    transport.parts.clear()
    seen: list[tuple[int, int]] = []

    build = await sdk.upload_build(
        project.id, application.id, file, progress=lambda d, t: seen.append((d, t)),
        multipart_threshold=0, parts_in_flight=4, resume_dir=state,
    )  # fmt: skip

    assert sorted(transport.parts) == [2, 3]  # part 1 had arrived
    assert seen[0] == (8 * MiB, file.stat().st_size)  # the progress starts from it
    assert seen[-1] == (file.stat().st_size, file.stat().st_size)
    assert build.status.value == "ready"
    assert build.sha256 == hashlib.sha256(file.read_bytes()).hexdigest()
    assert list(state.iterdir()) == []  # nothing left to resume
    builds = await sdk.list_builds(project.id, application.id)
    assert [b.build_id for b in builds.builds] == [build.build_id]  # one upload, resumed
    await sdk.aclose()


async def test_an_upload_kept_past_its_link_starts_again(
    app: FastAPI, owner: Account, clock: FrozenClock, tmp_path: Path
) -> None:
    sdk = AsyncBuildbay(
        BASE_URL, owner.access_token, refresh_token=owner.refresh_token,
        transport=httpx.ASGITransport(app=app), retry=FAST,
    )  # fmt: skip
    project = await sdk.create_project("Acme")
    application = await sdk.create_application(project.id, "Desktop")
    file = big_file(tmp_path, 12 * MiB)
    state = tmp_path / "state"

    def crash_in_part_2(done: int, total: int) -> None:
        if done > 9 * MiB:
            raise Crash

    with pytest.raises(Crash):
        await sdk.upload_build(
            project.id, application.id, file, progress=crash_in_part_2,
            multipart_threshold=0, parts_in_flight=1, resume_dir=state,
        )  # fmt: skip
    (kept,) = state.iterdir()
    cut_off = json.loads(kept.read_text())["build_id"]
    clock.advance(days=2)  # past the upload's day

    build = await sdk.upload_build(
        project.id, application.id, file, multipart_threshold=0, resume_dir=state
    )

    assert build.status.value == "ready"
    assert build.build_id != cut_off
    assert build.sha256 == hashlib.sha256(file.read_bytes()).hexdigest()
    await sdk.aclose()


def test_the_sync_client_resumes_only_the_same_file(server: str, tmp_path: Path) -> None:
    """Against a real server process (the blocking client's threads send the parts): an upload
    cut off, then the file changed under the same name, starts a new upload."""
    file = big_file(tmp_path, 12 * MiB)
    state = tmp_path / "state"

    def crash_in_part_2(done: int, total: int) -> None:
        if done > 9 * MiB:
            raise Crash

    with Buildbay(server, retry=FAST) as client:
        client.register("parts@example.com", "a long password", "Parts")
        project = client.create_project("Acme")
        application = client.create_application(project.id, "Desktop")
        with pytest.raises(Crash):
            client.upload_build(
                project.id, application.id, file, progress=crash_in_part_2,
                multipart_threshold=0, parts_in_flight=1, resume_dir=state,
            )  # fmt: skip
        (kept,) = state.iterdir()
        cut_off = json.loads(kept.read_text())["build_id"]
        file.write_bytes(file.read_bytes()[::-1])  # another file under the same name

        build = client.upload_build(
            project.id, application.id, file, multipart_threshold=0, resume_dir=state
        )

    assert build.status.value == "ready"
    assert build.build_id != cut_off
    assert build.sha256 == hashlib.sha256(file.read_bytes()).hexdigest()


def test_a_resumed_upload_in_parts_to_a_bucket_sends_only_the_missing_parts(
    server_env: dict[str, str], s3_server: S3Server, tmp_path: Path
) -> None:
    """A server on S3 storage (moto): the part addresses are the bucket's presigned UploadPart
    URLs, the bytes go there and never through Buildbay; cut off, the upload resumes, and the
    bucket's parts list is what the second run trusts."""
    env = {
        **server_env,
        **s3_server.env,
        "BUILDBAY_STORAGE": "s3",
        "BUILDBAY_S3_BUCKET": s3_server.new_bucket(),
        "BUILDBAY_S3_ENDPOINT_URL": s3_server.endpoint_url,
    }
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    file = big_file(tmp_path, 20 * MiB + 5)
    state = tmp_path / "state"
    sent: list[str] = []

    def crash_in_part_2(done: int, total: int) -> None:
        if done > 9 * MiB:
            raise Crash

    class Noting(httpx.HTTPTransport):
        def handle_request(self, request: httpx.Request) -> httpx.Response:
            if "partNumber" in request.url.params:
                assert str(request.url).startswith(s3_server.endpoint_url)  # the bucket, not us
                sent.append(request.url.params["partNumber"])
            return super().handle_request(request)

    argv = [sys.executable, "-m", "buildbay", "serve", "--port", str(port)]
    with (
        running(argv, env=env, log_path=tmp_path / "server.log", ready_url=f"{base}/readyz"),
        Buildbay(base, retry=FAST, transport=Noting()) as client,
    ):
        client.register("bucket@example.com", "a long password", "Bucket")
        project = client.create_project("Acme")
        application = client.create_application(project.id, "Desktop")
        with pytest.raises(Crash):
            client.upload_build(
                project.id, application.id, file, progress=crash_in_part_2,
                multipart_threshold=0, parts_in_flight=1, resume_dir=state,
            )  # fmt: skip
        sent.clear()
        build = client.upload_build(
            project.id, application.id, file, multipart_threshold=0, resume_dir=state
        )

    assert sorted(sent) == ["2", "3"]
    assert build.status.value == "ready"
    assert build.sha256 == hashlib.sha256(file.read_bytes()).hexdigest()

"""One test per status of the error tables (seed's Errors, contract's RFC 9457 section)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from buildbay.app import create_app
from buildbay.clock import FrozenClock
from buildbay.config import GiB, Settings
from tests.conftest import BASE_URL, Account, Api, assert_problem

PROBLEM_FIELDS = {"type", "title", "status", "detail", "code", "requestId"}
# Every response of `client` here is checked for hashes, secrets and internals (tests/leaks.py).
pytestmark = pytest.mark.usefixtures("no_leaks")


def assert_error(r: httpx.Response, status: int, code: str) -> dict[str, Any]:
    """assert_problem, plus: exactly the problem fields, and the request id in the header too."""
    body = assert_problem(r, status, code)
    assert PROBLEM_FIELDS <= set(body) <= PROBLEM_FIELDS | {"errors"}
    assert body["type"] == "/problems/" + code.replace("_", "-")
    assert r.headers["x-request-id"] == body["requestId"]
    return body


@contextlib.asynccontextmanager
async def serve(
    app: FastAPI, *, raise_app_exceptions: bool = True
) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=raise_app_exceptions)
    async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as client:
        yield client
    await app.state.ctx.dispose()


async def test_malformed_json_is_400(client: httpx.AsyncClient, owner: Account) -> None:
    r = await client.post(
        "/api/projects",
        content=b'{"name": "Acme"',
        headers={**owner.headers, "Content-Type": "application/json"},
    )

    body = assert_error(r, 400, "malformed_json")
    assert "errors" not in body


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"[" * 1000 + b"]" * 1000, "it nests too deeply"),
        (b"[" * 100_000 + b"]" * 100_000, "it nests too deeply"),
        (b'{"name": "Ac\xffme"}', "it is not UTF-8"),
        (b'{"name": "Acme", "x": ' + b"1" * 5000 + b"}", "it holds a number too long to read"),
    ],
    ids=["1000-levels", "100000-levels", "invalid-utf8", "5000-digits"],
)
async def test_a_body_json_cannot_read_is_400_malformed_json(
    client: httpx.AsyncClient, owner: Account, content: bytes, reason: str
) -> None:
    r = await client.post(
        "/api/projects",
        content=content,
        headers={**owner.headers, "Content-Type": "application/json"},
    )

    body = assert_error(r, 400, "malformed_json")
    assert body["detail"] == f"The request body is not valid JSON: {reason}"
    assert "errors" not in body
    r = await client.get("/api/projects", headers=owner.headers)
    assert r.json()["projects"] == []


async def test_a_body_that_is_not_json_is_400(client: httpx.AsyncClient, owner: Account) -> None:
    r = await client.post(
        "/api/projects",
        content=b"name=Acme",
        headers={**owner.headers, "Content-Type": "text/plain"},
    )
    assert_error(r, 400, "unsupported_content_type")

    r = await client.post(
        "/api/projects",
        content=b'{"name": "Acme"}',
        headers={**owner.headers, "Content-Type": "application/x-www-form-urlencoded"},
    )
    assert_error(r, 400, "unsupported_content_type")
    r = await client.get("/api/projects", headers=owner.headers)
    assert r.json()["projects"] == []


async def test_a_missing_or_expired_token_is_401(
    client: httpx.AsyncClient, owner: Account, clock: FrozenClock
) -> None:
    r = await client.get("/api/projects")
    assert_error(r, 401, "not_authenticated")
    assert r.headers["www-authenticate"] == "Bearer"

    r = await client.get("/api/projects", headers={"Authorization": "Bearer nonsense"})
    assert_error(r, 401, "invalid_token")

    clock.advance(hours=24, seconds=1)
    r = await client.get("/api/projects", headers=owner.headers)
    assert_error(r, 401, "token_expired")
    assert r.headers["www-authenticate"] == "Bearer"


async def test_a_project_without_rights_is_403(
    api: Api, client: httpx.AsyncClient, owner: Account
) -> None:
    stranger = await api.register()
    project = await api.project(owner)

    r = await client.get(f"/api/projects/{project['id']}", headers=stranger.headers)

    body = assert_error(r, 403, "not_a_member")
    assert project["name"] not in r.text
    assert "errors" not in body


async def test_an_unknown_project_is_404(client: httpx.AsyncClient, owner: Account) -> None:
    r = await client.get("/api/projects/prj_00000000000000000000000000", headers=owner.headers)

    assert_error(r, 404, "project_not_found")


async def test_an_unknown_route_is_a_problem_404(client: httpx.AsyncClient) -> None:
    for path in ("/api/no-such-thing", "/nope", "/api/projects/x/y/z/w"):
        r = await client.get(path)

        body = assert_error(r, 404, "not_found")
        assert body["detail"]


async def test_a_wrong_method_is_a_problem_405(client: httpx.AsyncClient) -> None:
    r = await client.patch("/api/projects", json={"name": "x"})

    assert_error(r, 405, "method_not_allowed")


async def test_allow_lists_every_method_of_the_path(client: httpx.AsyncClient) -> None:
    # Each method is a route of its own; Allow names them all (RFC 9110), not just one.
    cases = {
        "/api/projects": "GET, POST",
        "/api/projects/prj_00000000000000000000000000": "DELETE, GET, PUT",
        "/api/account/api-tokens": "GET, POST",
        # A fixed segment beside a parameter ({buildId}): the template that answered counts.
        "/api/app-distribution/p/a/builds/verify": "POST",
    }
    for path, allowed in cases.items():
        r = await client.patch(path, json={})
        assert_error(r, 405, "method_not_allowed")
        assert r.headers["allow"] == allowed, path


async def test_internal_domains_are_valid_e_mail_addresses(client: httpx.AsyncClient) -> None:
    # A self-hosted service's users are often at special-use names (.local, .test).
    for email in ("dev@corp.local", "qa@team.test"):
        r = await client.post(
            "/api/auth/register", json={"email": email, "password": "correct horse"}
        )
        assert r.status_code == 201, r.text


async def test_an_e_mail_registered_twice_is_409(api: Api, client: httpx.AsyncClient) -> None:
    await api.register("twice@example.com")

    r = await client.post(
        "/api/auth/register", json={"email": "Twice@Example.com", "password": "correct horse"}
    )

    assert_error(r, 409, "email_taken")


async def test_a_json_body_over_1_mib_with_content_length_is_413(
    client: httpx.AsyncClient, owner: Account
) -> None:
    padding = " " * (1024 * 1024)
    r = await client.post(
        "/api/projects",
        content=f'{{"name": "Acme"{padding}}}'.encode(),
        headers={**owner.headers, "Content-Type": "application/json"},
    )

    assert_error(r, 413, "body_too_large")
    r = await client.get("/api/projects", headers=owner.headers)
    assert r.json()["projects"] == []


async def test_a_chunked_json_body_over_1_mib_is_413(
    client: httpx.AsyncClient, owner: Account
) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"name": "Acme"'
        for _ in range(17):
            yield b" " * 65536
        yield b"}"

    r = await client.post(
        "/api/projects",
        content=chunks(),
        headers={**owner.headers, "Content-Type": "application/json"},
    )

    assert r.request.headers.get("transfer-encoding") == "chunked"
    assert_error(r, 413, "body_too_large")
    r = await client.get("/api/projects", headers=owner.headers)
    assert r.json()["projects"] == []


async def test_a_small_chunked_json_body_is_accepted(
    client: httpx.AsyncClient, owner: Account
) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"name": '
        yield b'"Acme"}'

    r = await client.post(
        "/api/projects",
        content=chunks(),
        headers={**owner.headers, "Content-Type": "application/json"},
    )

    assert r.status_code == 201, r.text
    assert r.json()["name"] == "Acme"


async def test_a_file_size_above_the_free_plans_1_gib_is_413(
    api: Api, client: httpx.AsyncClient, owner: Account
) -> None:
    project = await api.project(owner)
    app = await api.application(owner, project["id"])
    link = f"/api/app-distribution/{project['id']}/{app['id']}/builds/upload-link"

    r = await client.post(
        link, json={"fileName": "huge.ipa", "fileSize": GiB + 1}, headers=owner.headers
    )
    assert_error(r, 413, "file_too_large")

    r = await client.post(
        link, json={"fileName": "max.ipa", "fileSize": GiB}, headers=owner.headers
    )
    assert r.status_code == 201, r.text


async def test_field_validation_is_422_with_field_errors(
    api: Api, client: httpx.AsyncClient, owner: Account
) -> None:
    r = await client.post(
        "/api/projects", json={"name": "", "colour": "red"}, headers=owner.headers
    )

    body = assert_error(r, 422, "validation_error")
    assert body["title"] == "Validation error"
    assert all(set(e) == {"field", "message"} for e in body["errors"])
    messages = {e["field"]: e["message"] for e in body["errors"]}
    assert set(messages) == {"name", "colour"}
    assert messages["colour"] == "is not a field of this request"
    assert "at least 1 character" in messages["name"]
    assert "name" in body["detail"]

    project = await api.project(owner)
    app = await api.application(owner, project["id"])
    r = await client.post(
        f"/api/app-distribution/{project['id']}/{app['id']}/builds/upload-link",
        json={"fileName": "a.apk", "fileSize": 0},
        headers=owner.headers,
    )
    body = assert_error(r, 422, "validation_error")
    assert [e["field"] for e in body["errors"]] == ["fileSize"]


async def test_too_many_requests_is_429_with_retry_after(
    settings: Settings, clock: FrozenClock
) -> None:
    limited = settings.model_copy(update={"rate_limit_free_per_minute": 3})
    async with serve(create_app(limited, clock=clock, migrate_on_start=False)) as client:
        user = await Api(client).register()  # the IP's first request of the minute
        for _ in range(3):
            r = await client.get("/api/projects", headers=user.headers)
            assert r.status_code == 200, r.text

        r = await client.get("/api/projects", headers=user.headers)

    body = assert_error(r, 429, "rate_limited")
    assert body["detail"]
    assert int(r.headers["retry-after"]) >= 1
    assert r.headers["ratelimit-policy"] == '"free";q=3;w=60'
    assert r.headers["ratelimit"].startswith('"free";r=0;')


async def test_an_unexpected_error_is_500_without_internals(app: FastAPI) -> None:
    async def explode() -> None:
        raise RuntimeError("kaboom at /srv/secret/config.py line 12")

    app.add_api_route("/api/test-only/explode", explode, methods=["GET"])
    async with serve(app, raise_app_exceptions=False) as client:
        r = await client.get("/api/test-only/explode", headers={"X-Request-ID": "trace-me-500"})

    body = assert_error(r, 500, "internal_error")
    assert body["requestId"] == "trace-me-500"
    # Sent past the middleware that sets them on every other response.
    assert r.headers["x-request-id"] == "trace-me-500"
    assert "default-src 'none'" in r.headers["content-security-policy"]
    assert r.headers["x-content-type-options"] == "nosniff"
    for leak in ("kaboom", "/srv/secret", "config.py", "Traceback", "RuntimeError", ".py"):
        assert leak not in r.text


async def test_an_unreachable_database_is_503_with_retry_after(
    tmp_path: Path, settings: Settings, clock: FrozenClock, owner: Account
) -> None:
    missing = tmp_path / "no-such-directory" / "buildbay.sqlite3"
    broken = settings.model_copy(update={"database_url": f"sqlite+aiosqlite:///{missing}"})
    broken.__dict__.pop("resolved_database_url", None)  # a cached_property of the copied settings
    async with serve(create_app(broken, clock=clock, migrate_on_start=False)) as client:
        r = await client.post(
            "/api/auth/register", json={"email": "new@example.com", "password": "correct horse"}
        )
        body = assert_error(r, 503, "database_unavailable")
        assert int(r.headers["retry-after"]) >= 1
        assert "no-such-directory" not in r.text
        assert "sqlite" not in body["detail"].lower()

        # A valid token cannot be checked either: 503, not 401.
        r = await client.get("/api/projects", headers=owner.headers)
        assert_error(r, 503, "database_unavailable")

        # The process stays up and says why it is not ready.
        r = await client.get("/healthz")
        assert r.status_code == 200, r.text
        r = await client.get("/readyz")
        assert r.status_code == 503
        assert r.json()["checks"]["database"] == "failing"


async def test_every_error_echoes_the_request_id(client: httpx.AsyncClient) -> None:
    r = await client.get("/api/projects", headers={"X-Request-ID": "ci-run-42.step_3"})
    body = assert_error(r, 401, "not_authenticated")
    assert body["requestId"] == "ci-run-42.step_3"

    # An unusable id (spaces, too long) is replaced by a fresh one, still echoed.
    for given in ("has spaces", "x" * 65):
        r = await client.get("/api/projects", headers={"X-Request-ID": given})
        body = assert_error(r, 401, "not_authenticated")
        assert body["requestId"] != given

    r = await client.post(
        "/api/projects", content=b"x", headers={"Content-Type": "text/plain", "X-Request-ID": "r1"}
    )
    assert assert_error(r, 400, "unsupported_content_type")["requestId"] == "r1"

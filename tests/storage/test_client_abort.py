"""A client that goes away in the middle of its PUT is the client's doing, not a server error:
the log says so at INFO (499, as nginx names it), without a traceback, and nothing is kept."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from fastapi import FastAPI
from starlette.types import Message

from buildbay.storage.local import LocalStorage
from tests.conftest import Account, Api, assert_problem


def files_under(path: Path) -> list[Path]:
    return sorted(p for p in path.rglob("*") if p.is_file())


async def put_then_disconnect(
    app: FastAPI, upload_url: str, size: int, sent: bytes
) -> list[Message]:
    """PUT `sent` (fewer than `size` bytes) to `upload_url`, then disconnect; what the app sent."""
    url = urlsplit(upload_url)
    scope: dict[str, Any] = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "PUT",
        "scheme": "http",
        "path": url.path,
        "raw_path": url.path.encode(),
        "query_string": url.query.encode(),
        "root_path": "",
        "headers": [
            (b"host", b"testserver"),
            (b"content-type", b"application/octet-stream"),
            (b"content-length", str(size).encode()),
        ],
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
    }
    messages: list[Message] = [
        {"type": "http.request", "body": sent[: len(sent) // 2], "more_body": True},
        {"type": "http.request", "body": sent[len(sent) // 2 :], "more_body": True},
        {"type": "http.disconnect"},
    ]

    async def receive() -> Message:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    answered: list[Message] = []

    async def send(message: Message) -> None:
        answered.append(message)

    await app(scope, receive, send)
    return answered


async def test_a_client_that_disconnects_mid_put_is_logged_as_an_abort_and_nothing_is_kept(
    app: FastAPI,
    client: httpx.AsyncClient,
    api: Api,
    owner: Account,
    caplog: pytest.LogCaptureFixture,
) -> None:
    project = await api.project(owner)
    application = await api.application(owner, project["id"])
    base = f"/api/app-distribution/{project['id']}/{application['id']}/builds"
    size = 4 * 1024 * 1024
    r = await client.post(
        f"{base}/upload-link",
        json={"fileName": "app.apk", "fileSize": size},
        headers=owner.headers,
    )
    assert r.status_code == 201, r.text
    link = r.json()

    with caplog.at_level(logging.INFO):
        answered = await put_then_disconnect(app, link["uploadUrl"], size, b"x" * 300_000)

    assert not [rec for rec in caplog.records if rec.levelno >= logging.WARNING], caplog.text
    assert not [rec for rec in caplog.records if rec.exc_info], caplog.text
    aborts = [rec for rec in caplog.records if "disconnected" in rec.getMessage()]
    assert [rec.levelno for rec in aborts] == [logging.INFO], caplog.text
    access = [rec.getMessage() for rec in caplog.records if rec.name == "buildbay.access"]
    assert len(access) == 1, access
    assert '" 499 ' in access[0], access
    # Whatever was answered (no one reads it) is not a 500.
    starts = [m for m in answered if m["type"] == "http.response.start"]
    assert all(m["status"] == 499 for m in starts), starts
    # Nothing half-stored: no object, no temporary file, and the build still waits for its bytes.
    storage = app.state.ctx.storage
    assert isinstance(storage, LocalStorage)
    assert files_under(storage.root) == []
    r = await client.post(
        f"{base}/verify", json={"buildId": link["buildId"]}, headers=owner.headers
    )
    assert_problem(r, 422, "upload_incomplete")

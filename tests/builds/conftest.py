"""Fixtures for the builds tests: one project and application, and the upload steps as helpers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

import httpx
import pytest
from fastapi import FastAPI

from buildbay.storage.base import Storage
from buildbay.storage.local import UPLOAD_PATH, LocalStorage
from tests.conftest import Account, Api
from tests.leaks import LeakGuard

DATA = b"PK\x03\x04 a small build file"


@pytest.fixture(autouse=True)
def _no_leaks(no_leaks: LeakGuard) -> None:
    """Every response of these tests is checked for hashes, secrets shown again and internals."""


def storage_key_of(link: dict[str, Any]) -> str:
    path = urlsplit(link["uploadUrl"]).path
    assert path.startswith(UPLOAD_PATH)
    return unquote(path[len(UPLOAD_PATH) :])


@dataclass
class Builds:
    """The builds endpoints of one application, called as `account` (the owner by default)."""

    client: httpx.AsyncClient
    api: Api
    owner: Account
    project_id: str
    app_id: str
    storage: Storage
    # What reaches the upload URLs: the app itself for local storage, real HTTP for a bucket.
    uploader: httpx.AsyncClient

    def key_of(self, link: dict[str, Any]) -> str:
        """The storage key of a build (as BuildService makes it)."""
        return f"{self.project_id}/{self.app_id}/{link['buildId']}"

    @property
    def base(self) -> str:
        return f"/api/app-distribution/{self.project_id}/{self.app_id}/builds"

    async def request_link(
        self, body: dict[str, Any], account: Account | None = None
    ) -> httpx.Response:
        return await self.client.post(
            f"{self.base}/upload-link", json=body, headers=(account or self.owner).headers
        )

    async def link(
        self, data: bytes = DATA, account: Account | None = None, **fields: Any
    ) -> dict[str, Any]:
        body = {"fileName": "app-release.apk", "fileSize": len(data), **fields}
        r = await self.request_link(body, account)
        assert r.status_code == 201, r.text
        link: dict[str, Any] = r.json()
        return link

    async def put(self, link: dict[str, Any], data: bytes = DATA) -> httpx.Response:
        return await self.uploader.put(
            link["uploadUrl"], content=data, headers=link["uploadHeaders"]
        )

    async def verify(
        self, build_id: str, account: Account | None = None, **fields: Any
    ) -> httpx.Response:
        return await self.client.post(
            f"{self.base}/verify",
            json={"buildId": build_id, **fields},
            headers=(account or self.owner).headers,
        )

    async def get(self, build_id: str, account: Account | None = None) -> httpx.Response:
        return await self.client.get(
            f"{self.base}/{build_id}", headers=(account or self.owner).headers
        )

    async def pending(self, data: bytes = DATA, **fields: Any) -> dict[str, Any]:
        """A build whose bytes have arrived but which is not verified."""
        link = await self.link(data, **fields)
        r = await self.put(link, data)
        assert r.status_code == 200, r.text
        return link

    async def ready(
        self, data: bytes = DATA, notes: str | None = None, **fields: Any
    ) -> dict[str, Any]:
        link = await self.pending(data, **fields)
        r = await self.verify(link["buildId"], **({} if notes is None else {"notes": notes}))
        assert r.status_code == 200, r.text
        build: dict[str, Any] = r.json()
        return build


@pytest.fixture
async def builds(
    app: FastAPI, client: httpx.AsyncClient, api: Api, owner: Account
) -> AsyncIterator[Builds]:
    project = await api.project(owner)
    application = await api.application(owner, project["id"])
    storage = app.state.ctx.storage
    if isinstance(storage, LocalStorage):
        yield Builds(client, api, owner, project["id"], application["id"], storage, client)
        return
    async with httpx.AsyncClient(timeout=30) as uploader:
        yield Builds(client, api, owner, project["id"], application["id"], storage, uploader)

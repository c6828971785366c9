"""Webhooks over the app (ASGI), with a real receiver on 127.0.0.1: the tests allow http:// and
private addresses, as a closed network would (the refusals have settings of their own)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from buildbay.app import create_app
from buildbay.clock import FrozenClock
from buildbay.config import Settings
from buildbay.context import AppContext
from tests.conftest import Account, Api
from tests.webhooks.receiver import Receiver, receiving


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return settings.model_copy(update={"webhook_allow_http": True, "webhook_allow_private": True})


@pytest.fixture
async def app(settings: Settings, clock: FrozenClock) -> AsyncIterator[FastAPI]:
    application = create_app(settings, clock=clock, migrate_on_start=False)
    yield application
    ctx: AppContext = application.state.ctx
    await ctx.webhook_sender.aclose()
    await ctx.dispose()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with receiving() as r:
        yield r


class Hooks:
    """The webhooks API and the outbox's worker, as the tests' steps."""

    def __init__(self, client: httpx.AsyncClient, app: FastAPI, api: Api) -> None:
        self.client = client
        self.app = app
        self.api = api

    @property
    def ctx(self) -> AppContext:
        ctx: AppContext = self.app.state.ctx
        return ctx

    async def create(
        self,
        account: Account,
        project_id: str,
        url: str,
        events: list[str] | None = None,
        receiver: Receiver | None = None,
    ) -> dict[str, Any]:
        # What the accounts' sign-ups wrote to the outbox (their verification mails) goes
        # first, so that `run` counts the webhook's jobs.
        await self.run()
        r = await self.client.post(
            f"/api/projects/{project_id}/webhooks",
            json={"url": url, "events": events or ["build.ready"], "description": "CI"},
            headers=account.headers,
        )
        assert r.status_code == 201, r.text
        body: dict[str, Any] = r.json()
        if receiver is not None:
            receiver.secrets.append(body["secret"])
        return body

    async def run(self) -> int:
        """Run the outbox's due jobs until none is left."""
        jobs = self.ctx.jobs
        assert jobs is not None
        return await jobs.run_until_idle()

    async def deliveries(
        self, account: Account, project_id: str, webhook_id: str
    ) -> list[dict[str, Any]]:
        r = await self.client.get(
            f"/api/projects/{project_id}/webhooks/{webhook_id}/deliveries",
            headers=account.headers,
        )
        assert r.status_code == 200, r.text
        deliveries: list[dict[str, Any]] = r.json()["deliveries"]
        return deliveries

    async def test(self, account: Account, project_id: str, webhook_id: str) -> str:
        r = await self.client.post(
            f"/api/projects/{project_id}/webhooks/{webhook_id}/test", headers=account.headers
        )
        assert r.status_code == 202, r.text
        return str(r.json()["deliveryId"])


@pytest.fixture
def hooks(client: httpx.AsyncClient, app: FastAPI, api: Api) -> Hooks:
    return Hooks(client, app, api)

"""Fixtures for the authentication tests: a second login, refreshing, and the leak guard."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import select

from buildbay.app import create_app
from buildbay.clock import FrozenClock
from buildbay.config import Settings
from buildbay.db.models import Base
from tests.conftest import BASE_URL, Account, Api
from tests.leaks import LeakGuard

Login = Callable[[Account], Awaitable[Account]]


@pytest.fixture(autouse=True)
def _no_leaks(no_leaks: LeakGuard) -> None:
    """Every response of these tests is checked for hashes, secrets shown again and internals."""


@pytest.fixture
def login(api: Api) -> Login:
    """Logs the account in again: a second session, with its own refresh-token family."""
    return api.login


Refresh = Callable[[str], Awaitable[httpx.Response]]


@pytest.fixture
def refresh(client: httpx.AsyncClient) -> Refresh:
    async def refresh(refresh_token: str) -> httpx.Response:
        return await client.post("/api/auth/refresh-token", json={"refresh_token": refresh_token})

    return refresh


def assert_new_token_pair(body: dict[str, Any], account: Account) -> None:
    """`body` is a TokenPair for `account`'s user, with tokens other than the ones it holds."""
    assert set(body) == {"access_token", "refresh_token", "token_type", "expires_in", "user"}
    assert body["token_type"] == "Bearer"
    assert body["expires_in"] == 86400
    assert body["user"] == account.user
    assert body["access_token"] != account.access_token
    assert body["refresh_token"] != account.refresh_token


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def stored_values(app: FastAPI, model: type[Base]) -> list[str]:
    """Every value of every row of the model's table, as text: to look for leaked secrets."""
    async with app.state.ctx.sessions() as db:
        rows = await db.scalars(select(model))
        return [str(getattr(row, column.key)) for row in rows for column in model.__table__.columns]


@pytest.fixture
async def two_processes(
    settings: Settings, clock: FrozenClock, redis_url: str
) -> AsyncIterator[list[tuple[FastAPI, httpx.AsyncClient]]]:
    """Two apps sharing the database and Redis, as two server processes would."""
    shared = settings.model_copy(update={"redis_url": redis_url})
    async with contextlib.AsyncExitStack() as stack:
        pair = []
        for _ in range(2):
            app = create_app(shared, clock=clock, migrate_on_start=False)
            stack.push_async_callback(app.state.ctx.dispose)
            client = await stack.enter_async_context(
                httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE_URL)
            )
            pair.append((app, client))
        yield pair

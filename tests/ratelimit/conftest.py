"""Fixtures for the rate-limit tests: plans, clients at other IP addresses, header parsing."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import update

from buildbay.auth.models import User
from buildbay.config import Plan
from tests.conftest import BASE_URL, Account

SetPlan = Callable[[Account, Plan], Awaitable[None]]


@pytest.fixture
def set_plan(app: FastAPI) -> SetPlan:
    """Moves the account to another plan, straight in the database (as the operator's CLI does)."""

    async def set_plan(account: Account, plan: Plan) -> None:
        async with app.state.ctx.sessions() as db, db.begin():
            result = await db.execute(
                update(User).where(User.id == account.user["id"]).values(plan=plan)
            )
            assert result.rowcount == 1

    return set_plan


ClientAt = Callable[[str], Awaitable[httpx.AsyncClient]]


@pytest.fixture
async def client_at(app: FastAPI) -> AsyncIterator[ClientAt]:
    """A client whose requests come from the given IP address (`client` is 127.0.0.1)."""
    async with AsyncExitStack() as stack:

        async def client_at(ip: str) -> httpx.AsyncClient:
            transport = httpx.ASGITransport(app=app, client=(ip, 50000))
            return await stack.enter_async_context(
                httpx.AsyncClient(transport=transport, base_url=BASE_URL)
            )

        yield client_at


_RATELIMIT = re.compile(r'^"(?P<policy>[a-z]+)";r=(?P<remaining>\d+);t=(?P<reset>\d+)$')


@dataclass(frozen=True)
class RateLimitHeader:
    policy: str
    remaining: int
    reset: int


def ratelimit(response: httpx.Response) -> RateLimitHeader:
    """The parsed `RateLimit` header; fails if it is missing or malformed."""
    match = _RATELIMIT.match(response.headers["RateLimit"])
    assert match is not None, response.headers["RateLimit"]
    return RateLimitHeader(match["policy"], int(match["remaining"]), int(match["reset"]))

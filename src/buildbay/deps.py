"""The application's shared parts, and the `Annotated` dependency aliases routes use."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

from fastapi import Depends, Request
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from buildbay.auth.cache import AccessTokenCache
from buildbay.auth.tokens import AccessTokenCodec
from buildbay.clock import Clock
from buildbay.config import Settings
from buildbay.db.engine import transaction
from buildbay.ratelimit.limiter import RateLimiter

if TYPE_CHECKING:
    from buildbay.storage.base import Storage
    from buildbay.storage.signing import UrlSigner


@dataclass
class AppContext:
    """Everything a request may need, built once by create_app (no import-time globals)."""

    settings: Settings
    engine: AsyncEngine
    sessions: async_sessionmaker[AsyncSession]
    clock: Clock
    storage: Storage
    signer: UrlSigner
    limiter: RateLimiter
    access_tokens: AccessTokenCodec
    access_cache: AccessTokenCache | None  # None with several processes (see auth/cache.py)


def get_context(request: Request) -> AppContext:
    ctx: AppContext = request.app.state.ctx
    return ctx


async def _context(request: Request) -> AppContext:
    # Dependencies that do not block are `async def`: FastAPI runs a plain `def` dependency in a
    # worker thread, a thread round trip per request.
    return get_context(request)


async def get_session(request: Request) -> AsyncIterator[AsyncSession]:
    # `async with`, not `async for` over another generator: an error raised in the route is
    # thrown in here and must reach the rollback, not leave a suspended generator (and its
    # connection) for the garbage collector.
    async with transaction(get_context(request).sessions) as session:
        yield session


Context = Annotated[AppContext, Depends(_context)]
# scope="function": the transaction commits before the response is sent, so a client never sees
# success for a write that did not land.
SessionDep = Annotated[AsyncSession, Depends(get_session, scope="function")]

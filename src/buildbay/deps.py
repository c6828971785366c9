"""The application's shared parts, and the `Annotated` dependency aliases routes use."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import Depends, Request, Response
from fastapi.routing import APIRoute
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from buildbay.auth.cache import AccessTokenCache
from buildbay.auth.tokens import AccessTokenCodec
from buildbay.clock import Clock
from buildbay.config import Settings
from buildbay.db.engine import finish
from buildbay.ratelimit.limiter import RateLimiter

if TYPE_CHECKING:
    from buildbay.auth.revocations import SharedRevocations
    from buildbay.builds.install import InstallTokens
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
    install_tokens: InstallTokens
    limiter: RateLimiter
    access_tokens: AccessTokenCodec
    access_cache: AccessTokenCache
    revocations: SharedRevocations | None  # with Redis: several processes (auth/revocations.py)


def get_context(request: Request) -> AppContext:
    ctx: AppContext = request.app.state.ctx
    return ctx


async def _context(request: Request) -> AppContext:
    # Dependencies that do not block are `async def`: FastAPI runs a plain `def` dependency in a
    # worker thread, a thread round trip per request.
    return get_context(request)


_SESSION = "buildbay.session"


class TransactionRoute(APIRoute):
    """A route whose request session (SessionDep) commits once the response is built, before it
    is sent, so a client never sees success for a write that did not land; any error rolls it
    back. Every router of the API uses this class (tests/db/test_request_transactions.py checks
    it).

    A route class rather than a generator dependency: FastAPI runs a generator dependency
    through context managers and an exit stack, which cost more on every request than the
    session itself when the request only reads.
    """

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def run_in_transaction(request: Request) -> Response:
            scope = request.scope
            scope[_SESSION] = None  # get_session creates it, if the route asks for one
            try:
                response = await handler(request)
            except BaseException:
                if (session := scope.pop(_SESSION, None)) is not None:
                    await finish(session, ok=False)
                raise
            if (session := scope.pop(_SESSION, None)) is not None:
                await finish(session, ok=True)
            return response

        return run_in_transaction


def request_session(request: Request) -> AsyncSession:
    """The request's session, created on first use; TransactionRoute ends it."""
    scope = request.scope
    session: AsyncSession | None = scope.get(_SESSION)
    if session is None:
        if _SESSION not in scope:
            raise RuntimeError(f"{scope['path']}: SessionDep needs a TransactionRoute")
        session = scope[_SESSION] = get_context(request).sessions()
    return session


async def get_session(request: Request) -> AsyncSession:
    return request_session(request)


Context = Annotated[AppContext, Depends(_context)]
SessionDep = Annotated[AsyncSession, Depends(get_session)]

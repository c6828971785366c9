"""`CurrentUser`: who is calling, checked on every resource endpoint and counted for rate limits."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPBearer
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.auth.service import AuthService, Principal
from buildbay.auth.tokens import API_TOKEN_PREFIX
from buildbay.config import Plan
from buildbay.deps import AppContext, Context, SessionDep, get_context, request_session
from buildbay.errors import NotAuthenticated, RateLimited


def make_auth_service(ctx: AppContext, db: AsyncSession) -> AuthService:
    return AuthService(
        db,
        ctx.access_tokens,
        ctx.clock.now(),
        timedelta(days=ctx.settings.refresh_token_ttl_days),
        ctx.access_cache,
        ctx.revocations,
    )


async def auth_service(ctx: Context, db: SessionDep) -> AuthService:
    return make_auth_service(ctx, db)


AuthServiceDep = Annotated[AuthService, Depends(auth_service)]


def client_ip(request: Request) -> str:
    return request.client.host if request.client else "unknown"


async def count_request(ctx: AppContext, request: Request, key: str, plan: Plan) -> None:
    """Count one /api request against `key`'s plan; 429 once the window is spent."""
    state = await ctx.limiter.hit(key, plan)
    if state is None:
        return
    request.state.ratelimit = state
    if not state.allowed:
        raise RateLimited(
            f"More than {state.limit} requests in a minute on the {state.policy} plan",
            headers={"Retry-After": str(state.reset_after)},
        )


async def limit_by_ip(ctx: Context, request: Request) -> None:
    """For endpoints that take no token: counted per client IP at the free rate."""
    await count_request(ctx, request, f"ip:{client_ip(request)}", Plan.FREE)


class _BearerAuthentication(HTTPBearer):
    """The bearer scheme of the OpenAPI document, which also authenticates the token.

    One dependency rather than the scheme plus a function using it: FastAPI solves every
    dependency of every request anew, and on this path, which every authenticated request takes,
    that costs more than the work it wraps. For the same reason the context and the service are
    built here, not declared as dependencies.
    """

    async def __call__(self, request: Request) -> Principal:  # type: ignore[override]
        # (HTTPBearer's returns only the credentials.) The session is the request's own, taken
        # directly rather than declared: one dependency fewer to solve on every request.
        credentials = await super().__call__(request)
        ctx = get_context(request)
        service = make_auth_service(ctx, request_session(request))
        try:
            if credentials is None or credentials.scheme.lower() != "bearer":
                raise NotAuthenticated("Send `Authorization: Bearer <token>`")
            token = credentials.credentials
            if token.startswith(API_TOKEN_PREFIX):
                principal = await service.authenticate_api_token(token)
            else:
                principal = await service.authenticate_access_token(token)
        except NotAuthenticated:
            await limit_by_ip(ctx, request)
            raise
        await count_request(ctx, request, f"user:{principal.user.id}", principal.user.plan)
        return principal


# auto_error=False: a missing header is our own 401 problem, not FastAPI's 403. The scheme keeps
# the name it had as a plain HTTPBearer.
current_user = _BearerAuthentication(
    auto_error=False,
    scheme_name="HTTPBearer",
    description="An access token or an API token (`bb_...`)",
)
CurrentUser = Annotated[Principal, Depends(current_user)]
PublicRateLimit = Depends(limit_by_ip)

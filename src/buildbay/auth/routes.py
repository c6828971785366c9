from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Path, Request, Response, status

from buildbay.auth import schemas
from buildbay.auth.dependencies import AuthServiceDep, CurrentUser, PublicRateLimit, client_ip
from buildbay.auth.service import IssuedTokens
from buildbay.builds.service import storage_usage
from buildbay.deps import Context, SessionDep, TransactionRoute
from buildbay.errors import problem_responses

router = APIRouter(prefix="/api/auth", tags=["auth"], route_class=TransactionRoute)
account_router = APIRouter(prefix="/api/account", tags=["account"], route_class=TransactionRoute)


def _token_response(issued: IssuedTokens) -> schemas.TokenResponse:
    return schemas.TokenResponse(
        access_token=issued.access_token,
        refresh_token=issued.refresh_token,
        expires_in=issued.expires_in,
        user=schemas.User.model_validate(issued.user),
    )


@router.post(
    "/register",
    status_code=status.HTTP_201_CREATED,
    dependencies=[PublicRateLimit],
    responses=problem_responses(400, 409, 413, 422, 429),
    summary="Create an account and log in",
)
async def register(body: schemas.RegisterRequest, service: AuthServiceDep) -> schemas.TokenResponse:
    return _token_response(await service.register(body.email, body.password, body.name))


@router.post(
    "/login",
    dependencies=[PublicRateLimit],
    responses=problem_responses(400, 401, 413, 422, 429),
    summary="Log in with e-mail and password",
)
async def login(
    body: schemas.LoginRequest, service: AuthServiceDep, ctx: Context, request: Request
) -> schemas.TokenResponse:
    issued = await service.login(body.email, body.password, client_ip(request), ctx.limiter)
    return _token_response(issued)


@router.post(
    "/refresh-token",
    dependencies=[PublicRateLimit],
    responses=problem_responses(400, 401, 413, 422, 429),
    summary="Exchange a refresh token for a new token pair (the old one is spent)",
)
async def refresh_token(
    body: schemas.RefreshRequest, service: AuthServiceDep
) -> schemas.TokenResponse:
    return _token_response(await service.refresh(body.refresh_token))


@router.post(
    "/logout",
    status_code=status.HTTP_204_NO_CONTENT,
    responses=problem_responses(400, 401, 413, 422, 429),
    summary="Revoke this session: its access tokens and its refresh-token family",
)
async def logout(
    principal: CurrentUser,
    service: AuthServiceDep,
    body: Annotated[schemas.LogoutRequest | None, Body()] = None,
) -> Response:
    await service.logout(principal, body.refresh_token if body else None)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post(
    "/change-password",
    status_code=status.HTTP_204_NO_CONTENT,
    responses=problem_responses(400, 401, 413, 422, 429),
    summary="Change your password; your other sessions end, API tokens stay",
)
async def change_password(
    body: schemas.ChangePasswordRequest,
    principal: CurrentUser,
    service: AuthServiceDep,
    ctx: Context,
    request: Request,
) -> Response:
    await service.change_password(
        principal, body.current_password, body.new_password, client_ip(request), ctx.limiter
    )
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get(
    "/me",
    responses=problem_responses(401, 429),
    summary="The calling user, with storage usage and the plan's limits",
)
async def me(principal: CurrentUser, ctx: Context, db: SessionDep) -> schemas.Me:
    user, settings = principal.user, ctx.settings
    usage = await storage_usage(db, user.id)
    return schemas.Me(
        id=user.id,
        email=user.email,
        name=user.name,
        plan=user.plan,
        created_at=user.created_at,
        usage=schemas.Usage(storage_bytes=usage.bytes, builds=usage.builds),
        limits=schemas.Limits(
            storage_quota_bytes=settings.storage_quota(user.plan),
            max_upload_bytes=settings.max_upload_bytes(user.plan),
            requests_per_minute=settings.requests_per_minute(user.plan)
            if settings.rate_limit_enabled
            else None,
        ),
    )


@account_router.get(
    "/api-tokens", responses=problem_responses(401, 429), summary="List your API tokens"
)
async def list_api_tokens(principal: CurrentUser, service: AuthServiceDep) -> schemas.ApiTokenList:
    tokens = await service.list_api_tokens(principal.user)
    return schemas.ApiTokenList(api_tokens=[schemas.ApiToken.model_validate(t) for t in tokens])


@account_router.post(
    "/api-tokens",
    status_code=status.HTTP_201_CREATED,
    responses=problem_responses(400, 401, 413, 422, 429),
    summary="Create an API token for CI (the secret is shown once)",
)
async def create_api_token(
    body: schemas.CreateApiTokenRequest, principal: CurrentUser, service: AuthServiceDep
) -> schemas.CreatedApiToken:
    api_token, secret = await service.create_api_token(
        principal.user, body.name, body.expires_in_days
    )
    return schemas.CreatedApiToken.model_validate(
        {**schemas.ApiToken.model_validate(api_token).model_dump(), "token": secret}
    )


@account_router.delete(
    "/api-tokens/{id}",
    status_code=status.HTTP_204_NO_CONTENT,
    responses=problem_responses(401, 404, 429),
    summary="Revoke an API token",
)
async def delete_api_token(
    token_id: Annotated[str, Path(alias="id")],
    principal: CurrentUser,
    service: AuthServiceDep,
) -> Response:
    await service.delete_api_token(principal.user, token_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)

from __future__ import annotations

from typing import Annotated
from urllib.parse import urlencode

from fastapi import APIRouter, Body, Path, Request, Response, status

from buildbay.auth import schemas
from buildbay.auth.cli_sign_in import DEVICE_PAGE, IssuedCliToken
from buildbay.auth.dependencies import (
    AccountServiceDep,
    Authenticated,
    CurrentUser,
    InteractiveUser,
    LoginServiceDep,
    PublicRateLimit,
    cli_sign_ins,
    client_ip,
    email_changes,
    email_verifications,
    password_resets,
)
from buildbay.auth.logins import IssuedTokens
from buildbay.auth.reads import USER, UserRecord, api_tokens_of, pending_email_of, user_by_id
from buildbay.builds.reads import storage_usage
from buildbay.context import AppContext
from buildbay.db.reads import Reads
from buildbay.deps import Context, ReadsDep, SessionDep, TransactionRoute
from buildbay.errors import NotAuthenticated
from buildbay.problems import problem_responses

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
    responses=problem_responses(400, 403, 409, 413, 422, 429),
    summary="Create an account and log in (403 when the server's sign-up is closed or "
    "invite-only and this e-mail has no invitation)",
)
async def register(
    body: schemas.RegisterRequest, service: AccountServiceDep
) -> schemas.TokenResponse:
    return _token_response(await service.register(body.email, body.password, body.name))


@router.post(
    "/login",
    dependencies=[PublicRateLimit],
    responses=problem_responses(400, 401, 413, 422, 429),
    summary="Log in with e-mail and password",
)
async def login(
    body: schemas.LoginRequest, service: LoginServiceDep, ctx: Context, request: Request
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
    body: schemas.RefreshRequest, service: LoginServiceDep
) -> schemas.TokenResponse:
    return _token_response(await service.refresh(body.refresh_token))


@router.post(
    "/logout",
    status_code=status.HTTP_204_NO_CONTENT,
    responses=problem_responses(400, 401, 413, 422, 429),
    summary="Revoke this session: its access tokens and its refresh-token family",
)
async def logout(
    principal: Authenticated,
    service: LoginServiceDep,
    body: Annotated[schemas.LogoutRequest | None, Body()] = None,
) -> Response:
    await service.logout(principal, body.refresh_token if body else None)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post(
    "/change-password",
    status_code=status.HTTP_204_NO_CONTENT,
    responses=problem_responses(400, 401, 403, 413, 422, 429),
    summary="Change your password (a login only, not an API token); your other sessions end, "
    "API tokens stay",
)
async def change_password(
    body: schemas.ChangePasswordRequest,
    principal: InteractiveUser,
    service: AccountServiceDep,
    ctx: Context,
    request: Request,
) -> Response:
    await service.change_password(
        principal, body.current_password, body.new_password, client_ip(request), ctx.limiter
    )
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post(
    "/password-reset",
    status_code=status.HTTP_202_ACCEPTED,
    response_class=Response,  # no body
    dependencies=[PublicRateLimit],
    responses={
        202: {"description": "Accepted, whether or not an account has this e-mail"},
        **problem_responses(400, 413, 422, 429),
    },
    summary="Mail a password-reset link, if an account has this e-mail (always 202)",
)
async def request_password_reset(
    body: schemas.PasswordResetRequest, ctx: Context, db: SessionDep, request: Request
) -> Response:
    await password_resets(ctx, db).request(str(body.email), client_ip(request), ctx.limiter)
    return Response(status_code=status.HTTP_202_ACCEPTED)


@router.post(
    "/password-reset/confirm",
    status_code=status.HTTP_204_NO_CONTENT,
    dependencies=[PublicRateLimit],
    responses=problem_responses(400, 413, 422, 429),
    summary="Set a new password with a reset link's token; every session and every API token "
    "of the account ends, and its e-mail address is verified",
)
async def confirm_password_reset(
    body: schemas.PasswordResetConfirm, service: AccountServiceDep, ctx: Context, db: SessionDep
) -> Response:
    await password_resets(ctx, db).confirm(body.token, body.password, service)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post(
    "/email-verification",
    status_code=status.HTTP_202_ACCEPTED,
    response_class=Response,  # no body
    responses={
        202: {"description": "The mail is on its way to your address"},
        **problem_responses(401, 403, 409, 429),
    },
    summary="Mail the link that verifies your e-mail address again (a login only; a few an "
    "hour; 409 once verified)",
)
async def resend_email_verification(
    principal: InteractiveUser, ctx: Context, db: SessionDep
) -> Response:
    await email_verifications(ctx, db).resend(principal.user.id, ctx.limiter)
    return Response(status_code=status.HTTP_202_ACCEPTED)


@router.post(
    "/email-verification/confirm",
    status_code=status.HTTP_204_NO_CONTENT,
    dependencies=[PublicRateLimit],
    responses=problem_responses(400, 413, 422, 429),
    summary="Verify an account's e-mail address with the token of the mailed link (no login "
    "needed: the link proves the mailbox)",
)
async def confirm_email_verification(
    body: schemas.EmailVerificationConfirm, ctx: Context, db: SessionDep
) -> Response:
    await email_verifications(ctx, db).confirm(body.token)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post(
    "/email-change",
    status_code=status.HTTP_202_ACCEPTED,
    response_class=Response,  # no body
    responses={
        202: {"description": "The confirmation mail is on its way to the new address"},
        **problem_responses(400, 401, 403, 409, 413, 422, 429),
    },
    summary="Ask to change your e-mail address, with your password (a login only); it changes "
    "when the link mailed to the new address is followed",
)
async def request_email_change(
    body: schemas.EmailChangeRequest,
    principal: InteractiveUser,
    ctx: Context,
    db: SessionDep,
    request: Request,
) -> Response:
    await email_changes(ctx, db).request(
        principal.user.id, str(body.new_email), body.password, client_ip(request), ctx.limiter
    )
    return Response(status_code=status.HTTP_202_ACCEPTED)


@router.post(
    "/email-change/confirm",
    status_code=status.HTTP_204_NO_CONTENT,
    dependencies=[PublicRateLimit],
    responses=problem_responses(400, 409, 413, 422, 429),
    summary="Change the account's e-mail address with the token of the link mailed to the new "
    "one (no login needed: the link proves the mailbox); the old address is told",
)
async def confirm_email_change(
    body: schemas.EmailChangeConfirm, ctx: Context, db: SessionDep
) -> Response:
    await email_changes(ctx, db).confirm(body.token)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post(
    "/logout-everywhere",
    status_code=status.HTTP_204_NO_CONTENT,
    responses=problem_responses(401, 403, 429),
    summary="Sign out everywhere: every session of yours ends, this one too (a login only); "
    "API tokens stay",
)
async def logout_everywhere(principal: InteractiveUser, service: LoginServiceDep) -> Response:
    await service.logout_everywhere(principal.user.id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get(
    "/me",
    responses=problem_responses(401, 429),
    summary="The calling user, with storage usage and the plan's limits",
)
async def me(principal: Authenticated, ctx: Context, reads: ReadsDep) -> schemas.Me:
    # The row as it is now: the caller's `user` may be a cached copy from before a change of
    # it (PUT /me, a one-click unsubscribe).
    user = await user_by_id(reads, principal.user.id)
    if user is None:  # deleted since its token was checked
        raise NotAuthenticated("The access token has been revoked", code="token_revoked")
    return await _me(user, ctx, reads)


@router.put(
    "/me",
    responses=problem_responses(400, 401, 403, 413, 422, 429),
    summary="Change your name or whether you get new-build e-mails (not with a limited API token)",
)
async def update_me(
    body: schemas.MeUpdate,
    principal: CurrentUser,
    service: AccountServiceDep,
    ctx: Context,
    db: SessionDep,
) -> schemas.Me:
    user = await service.update_profile(principal, body.name, body.notify_new_builds)
    return await _me(USER.of_entity(user), ctx, Reads.within(db))


async def _me(user: UserRecord, ctx: AppContext, reads: Reads) -> schemas.Me:
    settings = ctx.settings
    usage = await storage_usage(reads, user.id, ctx.clock.now())
    return schemas.Me(
        id=user.id,
        email=user.email,
        name=user.name,
        plan=user.plan,
        created_at=user.created_at,
        email_verified=user.email_verified,
        notify_new_builds=user.notify_new_builds,
        usage=schemas.Usage(storage_bytes=usage.bytes, builds=usage.builds),
        limits=schemas.Limits(
            storage_quota_bytes=settings.storage_quota(user.plan),
            max_upload_bytes=settings.max_upload_bytes(user.plan),
            requests_per_minute=settings.requests_per_minute(user.plan)
            if settings.rate_limit_enabled
            else None,
        ),
        pending_email=await pending_email_of(reads, user.id),
    )


# -- the command line's sign-in through the console (auth/cli_sign_in.py) -------------------------

_GRANT_ERRORS = (
    "400 problem+json whose `code` and `error` are RFC 6749/8628's code: `invalid_grant` "
    "(unknown, used, expired, or the wrong verifier or redirect URI)"
)


def _cli_token(issued: IssuedCliToken) -> schemas.CliToken:
    return schemas.CliToken.model_validate(
        {
            **schemas.ApiToken.model_validate(issued.api_token).model_dump(),
            "token": issued.secret,
            "user": schemas.User.model_validate(issued.user),
        }
    )


@router.post(
    "/cli/token",
    dependencies=[PublicRateLimit],
    responses=problem_responses(400, 413, 422, 429),
    summary="The command line's loopback sign-in (RFC 8252, PKCE S256): exchange the one-time "
    'code the console redirected with, and its verifier, for an API token named "CLI on '
    '<computer>"; refusals: ' + _GRANT_ERRORS,
)
async def cli_token(
    body: schemas.CliTokenRequest, ctx: Context, db: SessionDep, request: Request
) -> schemas.CliToken:
    service = cli_sign_ins(ctx, db)
    return _cli_token(await service.exchange_code(body.code, body.code_verifier, body.redirect_uri))


@router.post(
    "/device/code",
    dependencies=[PublicRateLimit],
    responses=problem_responses(400, 413, 422, 429),
    summary="Start the command line's device sign-in (RFC 8628): a device code to poll with "
    "and a user code for the person to enter in the console",
)
async def device_code(
    ctx: Context,
    db: SessionDep,
    request: Request,
    body: Annotated[schemas.DeviceCodeRequest | None, Body()] = None,
) -> schemas.DeviceCode:
    interval = ctx.settings.cli_device_poll_interval_seconds
    grant = await cli_sign_ins(ctx, db).start_device(body.client_name if body else None, interval)
    page = f"{ctx.settings.resolved_public_url}{DEVICE_PAGE}"
    return schemas.DeviceCode(
        device_code=grant.device_code,
        user_code=grant.user_code,
        verification_uri=page,
        verification_uri_complete=f"{page}?{urlencode({'code': grant.user_code})}",
        expires_in=grant.expires_in,
        interval=grant.interval,
    )


@router.post(
    "/device/token",
    dependencies=[PublicRateLimit],
    responses=problem_responses(400, 413, 422, 429),
    summary="Poll the command line's device sign-in (RFC 8628): the API token once the person "
    "allowed it; else " + _GRANT_ERRORS.removesuffix(")") + "), `authorization_pending`, "
    "`slow_down` (polled sooner than `interval`; wait 5 seconds more from now on), "
    "`access_denied`, `expired_token`",
)
async def device_token(
    body: schemas.DeviceTokenRequest, ctx: Context, db: SessionDep, request: Request
) -> schemas.CliToken:
    service = cli_sign_ins(ctx, db)
    return _cli_token(await service.poll_device(body.device_code))


@account_router.get(
    "/api-tokens",
    responses=problem_responses(401, 403, 429),
    summary="List your API tokens (a login only, not an API token)",
)
async def list_api_tokens(principal: InteractiveUser, reads: ReadsDep) -> schemas.ApiTokenList:
    tokens = await api_tokens_of(reads, principal.user.id)
    return schemas.ApiTokenList(api_tokens=[schemas.ApiToken.model_validate(t) for t in tokens])


@account_router.post(
    "/api-tokens",
    status_code=status.HTTP_201_CREATED,
    responses=problem_responses(400, 401, 403, 413, 422, 429),
    summary="Create an API token for CI, limited to a scope and projects if asked (a login only; "
    "the secret is shown once)",
)
async def create_api_token(
    body: schemas.CreateApiTokenRequest, principal: InteractiveUser, service: AccountServiceDep
) -> schemas.CreatedApiToken:
    api_token, secret = await service.create_api_token(
        principal.user, body.name, body.expires_in_days, body.scope, body.project_ids
    )
    return schemas.CreatedApiToken.model_validate(
        {**schemas.ApiToken.model_validate(api_token).model_dump(), "token": secret}
    )


@account_router.delete(
    "/api-tokens/{id}",
    status_code=status.HTTP_204_NO_CONTENT,
    responses=problem_responses(401, 403, 404, 429),
    summary="Revoke an API token (a login only, not an API token)",
)
async def delete_api_token(
    token_id: Annotated[str, Path(alias="id")],
    principal: InteractiveUser,
    service: AccountServiceDep,
) -> Response:
    await service.delete_api_token(principal.user, token_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)

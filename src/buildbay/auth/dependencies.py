"""Who is calling, checked on every resource endpoint and counted for rate limits, and what an
API token's limits let it do.

A route declares its caller with one of these, and the declaration is the rule:
- `CurrentUser`: a login, or an API token without a scope or project list (the default: a route
  that forgets to think about tokens refuses the limited ones);
- `InteractiveUser`: a login only, never an API token (the account's own endpoints);
- `Authenticated`: any valid credential, whatever its limits; the route honours them itself.
  The project and application dependencies (projects/access.py) check the token's project list
  and scope against what their route needs; the projects list shows a restricted token only its
  projects; `/me` and logout touch nothing a token's limits cover.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPBearer
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.audit.record import Origin
from buildbay.auth.accounts import AccountService
from buildbay.auth.authentication import Authentication, Principal
from buildbay.auth.cli_sign_in import CliSignIns
from buildbay.auth.email_change import EmailChangeLinks, EmailChanges
from buildbay.auth.enums import TokenScope
from buildbay.auth.logins import LoginService
from buildbay.auth.password_reset import PasswordResets
from buildbay.auth.tokens import API_TOKEN_PREFIX
from buildbay.auth.verification import EmailVerifications, VerificationLinks
from buildbay.config import Plan, Settings
from buildbay.context import AppContext
from buildbay.db.reads import Reads
from buildbay.deps import Context, get_context, in_unit_of_work
from buildbay.errors import NotAuthenticated, RateLimited
from buildbay.ratelimit.limiter import RateLimitState
from buildbay.sso.policy import password_policy


# How the account services are made from the app's context: one factory each, named for what it
# makes, called by the routes, the console and the operator commands alike.
def login_service(ctx: AppContext, db: AsyncSession) -> LoginService:
    return LoginService(
        db,
        ctx.access_tokens,
        ctx.clock.now(),
        timedelta(days=ctx.settings.refresh_token_ttl_days),
        ctx.access_cache,
        ctx.revocations,
        password_policy(ctx.settings),
    )


def account_service(ctx: AppContext, db: AsyncSession) -> AccountService:
    return AccountService(
        db,
        ctx.clock.now(),
        login_service(ctx, db),
        ctx.settings.signup,
        email_verifications(ctx, db),
    )


def email_verifications(ctx: AppContext, db: AsyncSession) -> EmailVerifications:
    settings = ctx.settings
    links = VerificationLinks(settings.signing_key, settings.resolved_public_url)
    per_day = settings.verification_mails_per_address_per_day
    return EmailVerifications(db, ctx.clock.now(), links, ctx.mail, per_day)


def email_changes(ctx: AppContext, db: AsyncSession) -> EmailChanges:
    settings = ctx.settings
    links = EmailChangeLinks(settings.signing_key, settings.resolved_public_url)
    per_day = settings.verification_mails_per_address_per_day
    return EmailChanges(db, ctx.clock.now(), links, ctx.mail, per_day)


def password_resets(ctx: AppContext, db: AsyncSession) -> PasswordResets:
    return PasswordResets(db, ctx.clock.now(), password_policy(ctx.settings))


def cli_sign_ins(ctx: AppContext, db: AsyncSession) -> CliSignIns:
    return CliSignIns(db, ctx.clock.now(), account_service(ctx, db))


LoginServiceDep = Annotated[LoginService, in_unit_of_work(login_service)]
AccountServiceDep = Annotated[AccountService, in_unit_of_work(account_service)]


def client_ip(request: Request) -> str:
    return request.client.host if request.client else "unknown"


def origin_of(request: Request) -> Origin:
    """Where a change came from, for its audit entry."""
    return Origin(client_ip(request), request.headers.get("user-agent"))


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


async def count_budget(
    ctx: AppContext, request: Request, key: str, per_minute: int, policy: str, refusal: str
) -> None:
    """Count one request against a budget of its own (not a plan's: the update check, the
    install pages); once it is spent, 429 with `refusal` ({limit} filled in). Of a request's
    budgets, the tightest gives the RateLimit headers."""
    state = await ctx.limiter.hit_budget(key, per_minute, policy)
    if state is None:
        return
    current: RateLimitState | None = getattr(request.state, "ratelimit", None)
    if current is None or state.remaining < current.remaining or not state.allowed:
        request.state.ratelimit = state
    if not state.allowed:
        raise RateLimited(
            refusal.format(limit=state.limit), headers={"Retry-After": str(state.reset_after)}
        )


async def limit_by_ip(ctx: Context, request: Request) -> None:
    """For endpoints that take no token: counted per client IP at the free rate."""
    await count_request(ctx, request, f"ip:{client_ip(request)}", Plan.FREE)


class _BearerAuthentication(HTTPBearer):
    """The bearer scheme of the OpenAPI document, which also authenticates the token.

    One dependency rather than the scheme plus a function using it: FastAPI solves every
    dependency of every request anew, and on this path, which every authenticated request takes,
    that costs more than the work it wraps. For the same reason the context and the service are
    built here, not declared as dependencies, and what an API token must be allowed is checked
    here (one instance per rule) rather than in a dependency of its own.
    """

    def __init__(
        self,
        *,
        login_only: bool = False,
        scope: TokenScope | None = None,
        any_scope: bool = False,
        restricted_ok: bool = False,
        publisher_ok: bool = False,
        description: str,
    ) -> None:
        # auto_error=False: a missing header is our own 401 problem, not FastAPI's 403. The
        # scheme keeps the name it had as a plain HTTPBearer.
        super().__init__(auto_error=False, scheme_name="HTTPBearer", description=description)
        self.login_only = login_only
        self.scope = scope
        self.any_scope = any_scope
        self.restricted_ok = restricted_ok
        self.publisher_ok = publisher_ok

    def allow(self, principal: Principal, settings: Settings) -> None:
        if self.login_only:
            principal.require_login(password_policy(settings))
        if not self.restricted_ok:
            principal.require_project(None)
        if not self.any_scope:
            principal.require_scope(self.scope)

    async def __call__(self, request: Request) -> Principal:  # type: ignore[override]
        # (HTTPBearer's returns only the credentials.) The session is the request's own, taken
        # directly rather than declared: one dependency fewer to solve on every request.
        credentials = await super().__call__(request)
        ctx = get_context(request)
        try:
            if credentials is None or credentials.scheme.lower() != "bearer":
                raise NotAuthenticated("Send `Authorization: Bearer <token>`")
            principal = await authenticate(
                ctx, credentials.credentials, publisher_ok=self.publisher_ok
            )
        except NotAuthenticated:
            await limit_by_ip(ctx, request)
            raise
        await count_request(ctx, request, f"user:{principal.user.id}", principal.user.plan)
        self.allow(principal, ctx.settings)
        return principal


async def authenticate(ctx: AppContext, token: str, *, publisher_ok: bool = False) -> Principal:
    """Who `token` (an access token or an API token) belongs to.

    A trusted publisher's exchanged token (limited to one application) is refused (403) unless
    `publisher_ok`: only the project and application dependencies (projects/access.py) take it,
    and they hold it to its application.

    Read on reads of its own, ended at once: the request's own (read-only or a unit of work, as
    its route declared) come after, so that a request never holds two pooled connections at a
    time. An API token's `lastUsedAt`, when due, is written in a short transaction of its own.
    """
    reads = Reads.on(ctx.read_engine)  # no connection until a lookup needs one
    try:
        service = Authentication(
            reads, ctx.access_tokens, ctx.clock.now(), ctx.access_cache, ctx.revocations
        )
        if token.startswith(API_TOKEN_PREFIX):
            principal = await service.authenticate_api_token(token)
        else:
            principal = await service.authenticate_access_token(token)
    finally:
        await reads.close()
    if not publisher_ok:
        principal.require_application(None)
    if service.needs_touch(principal):
        assert principal.api_token_id is not None  # needs_touch says so
        async with ctx.sessions() as db, db.begin():
            await account_service(ctx, db).touch_api_token(principal.api_token_id)
    return principal


_DESCRIPTION = "An access token or an API token (`bb_...`)"

# Any valid credential, whatever its limits: for the project and application dependencies, which
# check the token's project list and scope against the route's needs themselves.
authenticated = _BearerAuthentication(any_scope=True, restricted_ok=True, description=_DESCRIPTION)
Authenticated = Annotated[Principal, Depends(authenticated)]
# The same, and a trusted publisher's token too (limited to one application): for the project
# and application dependencies only, which hold it to its application.
member_of_application = _BearerAuthentication(
    any_scope=True, restricted_ok=True, publisher_ok=True, description=_DESCRIPTION
)
AuthenticatedOrPublisher = Annotated[Principal, Depends(member_of_application)]
current_user = _BearerAuthentication(description=_DESCRIPTION)
CurrentUser = Annotated[Principal, Depends(current_user)]
interactive_user = _BearerAuthentication(login_only=True, description=_DESCRIPTION)
InteractiveUser = Annotated[Principal, Depends(interactive_user)]
PublicRateLimit = Depends(limit_by_ip)

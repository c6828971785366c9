"""The console: the visitor's account: API tokens for CI."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.auth.dependencies import account_service, email_verifications
from buildbay.auth.enums import TokenScope
from buildbay.auth.models import User
from buildbay.auth.reads import api_tokens_of
from buildbay.auth.schemas import CreateApiTokenRequest
from buildbay.builds.reads import storage_usage
from buildbay.builds.service import human_size
from buildbay.console import shown_once
from buildbay.console.pages import (
    ConsoleRoute,
    FormError,
    form_fields,
    now,
    page,
    parse_form,
    posted_form,
    see_other,
    sessions,
    visit,
)
from buildbay.console.pages import sentence as as_sentence
from buildbay.console.session import Visitor
from buildbay.console.shown_once import Shown
from buildbay.context import AppContext
from buildbay.db.reads import Reads
from buildbay.deps import get_context
from buildbay.errors import Conflict, RateLimited, ValidationFailed
from buildbay.numbers import whole_number
from buildbay.projects.reads import projects_of_member

router = APIRouter(route_class=ConsoleRoute, include_in_schema=False)


@router.get("/account")
async def account_page(request: Request) -> Response:
    visitor, db = await visit(request)
    # A token made by the form that led here: its secret, this once.
    made = await shown_once.take(request, sessions(request), visitor, db, now(request),
                                 Shown.API_TOKEN)  # fmt: skip
    if made is None:
        return await _account(request, visitor, db)
    token_id, secret = made
    return await _account(request, visitor, db, created=token_id, secret=secret)


async def _account(
    request: Request, visitor: Visitor, db: AsyncSession, *, created: Any = None,
    secret: str | None = None, values: dict[str, str] | None = None,
    chosen: list[str] | None = None, errors: dict[str, str] | None = None,
    status_code: int = 200,
) -> Response:  # fmt: skip
    ctx: AppContext = get_context(request)
    # The row as it is now (the visitor's may predate an unsubscribe in another tab).
    user = await db.get_one(User, visitor.principal.user.id)
    reads = Reads.within(db)
    usage = await storage_usage(reads, user.id, ctx.clock.now())
    tokens = await api_tokens_of(reads, user.id)
    if isinstance(created, str):  # the id of a token made before the redirect
        created = next((t for t in tokens if t.id == created), None)
        secret = secret if created is not None else None  # revoked since, in another tab
    projects, _ = await projects_of_member(reads, user.id, MAX_TOKEN_CHOICES, None)
    settings = ctx.settings
    quota = settings.storage_quota(user.plan)
    rate = settings.requests_per_minute(user.plan) if settings.rate_limit_enabled else None
    return page(
        "console/account.html", visitor, status_code, user=user, usage=usage, quota=quota,
        max_upload=settings.max_upload_bytes(user.plan), rate=rate, tokens=tokens,
        created=created, secret=secret, values=values or {}, errors=errors or {},
        human_size=human_size, api_url=settings.resolved_public_url, projects=projects,
        project_names={p["id"]: p["name"] for p in projects}, chosen=set(chosen or []),
        scopes=TOKEN_SCOPES, saved=request.query_params.get("saved"),
        verification_sent=request.query_params.get("verification") == "sent",
    )  # fmt: skip


# The create form's choices of scope, in words (the value "" is no scope: all the user may do).
TOKEN_SCOPES = {
    "": "Everything you can do (but manage your account)",
    TokenScope.BUILDS_WRITE.value: "Builds: read, upload, verify and delete builds, share them",
    TokenScope.READ.value: "Read only: projects, applications and builds, and download",
}
# The projects the form offers (a token takes at most MAX_TOKEN_PROJECTS of them).
MAX_TOKEN_CHOICES = 200


@router.post("/account/tokens")
async def create_token(request: Request) -> Response:
    visitor, db = await visit(request)
    fields = await form_fields(request)
    form = await posted_form(request)
    chosen = [str(v) for v in form.getlist("projectIds") if isinstance(v, str)]
    data: dict[str, Any] = {"name": fields.get("name", "")}
    if fields.get("expiresInDays"):
        days = fields["expiresInDays"]
        number = whole_number(days)
        data["expiresInDays"] = days if number is None else number
    if fields.get("scope"):
        data["scope"] = fields["scope"]
    if fields.get("projects") == "some" or chosen:
        data["projectIds"] = chosen
    try:
        body = parse_form(CreateApiTokenRequest, data)
        assert isinstance(body, CreateApiTokenRequest)
        token, secret = await account_service(get_context(request), db).create_api_token(
            visitor.principal.user, body.name, body.expires_in_days, body.scope, body.project_ids
        )
    except FormError as exc:
        return await _account(request, visitor, db, values=fields, chosen=chosen,
                              errors=_token_errors(exc.by_field), status_code=422)  # fmt: skip
    except ValidationFailed as exc:
        errors = {e.field: e.message for e in exc.errors or []} or {"form": exc.detail}
        return await _account(request, visitor, db, values=fields, chosen=chosen,
                              errors=_token_errors(errors), status_code=422)  # fmt: skip
    # Shown on the page this redirects to, once (console/shown_once.py): a reload of that page
    # sends nothing again.
    await shown_once.keep(sessions(request), visitor, db, now(request), Shown.API_TOKEN,
                          token.id, secret)  # fmt: skip
    return see_other("/account#api-tokens")


def _token_errors(errors: dict[str, str]) -> dict[str, str]:
    """The create form's errors as sentences a person reads beside the field."""
    sentences = {
        "scope": "Choose one of the scopes listed.",
        "projectIds": "Choose at least one project, or all of them."
        if errors.get("projectIds", "").startswith("Choose at least")
        else None,
    }
    out = dict(errors)
    for name, sentence in sentences.items():
        if name in out and sentence:
            out[name] = sentence
    if "projectIds" in out and not out["projectIds"].endswith("."):
        out["projectIds"] = out["projectIds"][0].upper() + out["projectIds"][1:] + "."
    return out


@router.post("/account/tokens/{token_id}/revoke")
async def revoke_token(request: Request, token_id: str) -> Response:
    visitor, db = await visit(request)
    await account_service(get_context(request), db).delete_api_token(
        visitor.principal.user, token_id
    )
    return see_other("/account#api-tokens")


@router.post("/account/verification-mail")
async def resend_verification(request: Request) -> Response:
    visitor, db = await visit(request)
    ctx = get_context(request)
    try:
        await email_verifications(ctx, db).resend(visitor.principal.user.id, ctx.limiter)
    except Conflict:  # verified meanwhile (another tab): the page says so
        return see_other("/account#notifications")
    except RateLimited as exc:
        errors = {"verification": as_sentence(exc.detail)}
        refused = await _account(request, visitor, db, errors=errors, status_code=429)
        refused.headers.update(exc.headers)
        return refused
    return see_other("/account?verification=sent#notifications")


@router.post("/account/notifications")
async def notifications(request: Request) -> Response:
    visitor, db = await visit(request)
    fields = await form_fields(request)
    await account_service(get_context(request), db).update_profile(
        visitor.principal, None, notify_new_builds=fields.get("notifyNewBuilds") == "on"
    )
    return see_other("/account?saved=1#notifications")

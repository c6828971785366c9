"""The console: the visitor's account: their name, e-mail address (changed once the new one is
confirmed) and mail setting, their password, signing out everywhere, their plan and usage, and
API tokens for CI. Someone who only tests sees what they can use: no plan, quota or token form."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.auth.dependencies import (
    account_service,
    client_ip,
    email_changes,
    email_verifications,
    login_service,
)
from buildbay.auth.email_change import CHANGE_PAGE
from buildbay.auth.enums import TokenScope
from buildbay.auth.models import User
from buildbay.auth.reads import api_tokens_of, pending_email_of
from buildbay.auth.schemas import (
    ChangePasswordRequest,
    CreateApiTokenRequest,
    EmailChangeConfirm,
    EmailChangeRequest,
    MeUpdate,
)
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
from buildbay.projects.authorization import only_a_tester
from buildbay.projects.reads import projects_of_member, roles_of_user

router = APIRouter(route_class=ConsoleRoute, include_in_schema=False)


@router.get("/account")
async def account_page(request: Request) -> Response:
    visitor, db = await visit(request)
    # A token made by the form that led here: its secret, this once.
    made = await shown_once.take(request, sessions(request), visitor, db, now(request),
                                 Shown.API_TOKEN)  # fmt: skip
    return await _account(request, visitor, db, made=made)


async def _account(
    request: Request, visitor: Visitor, db: AsyncSession, *,
    made: tuple[str, str] | None = None, values: dict[str, str] | None = None,
    chosen: list[str] | None = None, errors: dict[str, str] | None = None,
    failed: str | None = None, status_code: int = 200,
) -> Response:  # fmt: skip
    """The page; `made`: the id and secret of a token made by the form that led here, shown
    once. After a refused form, `failed` names it ("token", "name", "email", "password") and
    its fields show `values` and `errors`."""
    ctx: AppContext = get_context(request)
    # The row as it is now (the visitor's may predate an unsubscribe in another tab).
    user = await db.get_one(User, visitor.principal.user.id)
    reads = Reads.within(db)
    # Someone who only tests is spared the plan, the quota and the token form: they upload
    # nothing and need no token for CI (tokens they have are still listed, to revoke).
    tester_only = only_a_tester((await roles_of_user(reads, user.id)).values())
    usage = await storage_usage(reads, user.id, ctx.clock.now())
    tokens = await api_tokens_of(reads, user.id)
    # Revoked since, in another tab: no secret to show.
    created = next((t for t in tokens if made and t.id == made[0]), None)
    secret = made[1] if created is not None and made else None
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
        scopes=TOKEN_SCOPES, saved=request.query_params.get("saved"), failed=failed,
        tester_only=tester_only, pending_email=await pending_email_of(reads, user.id),
        verification_sent=request.query_params.get("verification") == "sent",
    )  # fmt: skip


# The create form's choices of scope, in words (the value "" is no scope: all the user may do).
TOKEN_SCOPES = {
    "": "Everything you can do (but manage your account)",
    TokenScope.BUILDS_WRITE.value: "Builds: read, upload, verify and delete builds, share them",
    TokenScope.UPLOAD.value: "Upload: read, and upload and verify builds (no deleting or sharing)",
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
                              errors=_token_errors(exc.by_field), failed="token",
                              status_code=422)  # fmt: skip
    except ValidationFailed as exc:
        errors = {e.field: e.message for e in exc.errors or []} or {"form": exc.detail}
        return await _account(request, visitor, db, values=fields, chosen=chosen,
                              errors=_token_errors(errors), failed="token",
                              status_code=422)  # fmt: skip
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


# -- the profile, the address, the password, the sessions -------------------------------------


@router.post("/account/name")
async def change_name(request: Request) -> Response:
    visitor, db = await visit(request)
    fields = await form_fields(request)
    try:
        body = parse_form(MeUpdate, {"name": fields.get("name", "")})
    except FormError as exc:
        errors = {"name": exc.by_field.get("name", "Enter a name.")}
        return await _account(request, visitor, db, values=fields, errors=errors, failed="name",
                              status_code=422)  # fmt: skip
    assert isinstance(body, MeUpdate)
    await account_service(get_context(request), db).update_profile(
        visitor.principal, body.name, None
    )
    visitor.tell("Your name is saved.")
    return see_other("/account#profile")


@router.post("/account/email")
async def change_email(request: Request) -> Response:
    visitor, db = await visit(request)
    fields = await form_fields(request)
    values = {"newEmail": fields.get("newEmail", "")}
    ctx = get_context(request)
    try:
        body = parse_form(EmailChangeRequest, {"newEmail": values["newEmail"],
                                               "password": fields.get("password", "")})  # fmt: skip
        assert isinstance(body, EmailChangeRequest)
        async with db.begin_nested():  # a refusal leaves nothing of this request behind
            await email_changes(ctx, db).request(
                visitor.principal.user.id, str(body.new_email), body.password,
                client_ip(request), ctx.limiter,
            )  # fmt: skip
    except FormError as exc:
        return await _account(request, visitor, db, values=values, errors=exc.by_field,
                              failed="email", status_code=422)  # fmt: skip
    except (ValidationFailed, Conflict, RateLimited) as exc:
        refused = await _account(request, visitor, db, values=values,
                                 errors=_email_errors(exc), failed="email",
                                 status_code=exc.status)  # fmt: skip
        refused.headers.update(exc.headers)
        return refused
    visitor.tell(
        f"A confirmation mail is on its way to {body.new_email}: your address changes when "
        "you follow its link."
    )
    return see_other("/account#notifications")


def _email_errors(exc: ValidationFailed | Conflict | RateLimited) -> dict[str, str]:
    """The change of address's refusals, beside the field they are about."""
    said = {
        "wrong_password": ("password", "That is not your current password."),
        "same_email": ("newEmail", "This is your address already."),
        "email_taken": ("newEmail", "Another account has this address."),
        "email_not_mailable": ("newEmail", "This server cannot send mail to this address."),
    }
    field, text = said.get(exc.code or "", ("newEmail", as_sentence(exc.detail)))
    if exc.code == "login_throttled":
        field = "password"
    return {field: text}


@router.post("/account/password")
async def change_password(request: Request) -> Response:
    visitor, db = await visit(request)
    fields = await form_fields(request)
    ctx = get_context(request)
    try:
        body = parse_form(ChangePasswordRequest, {
            "currentPassword": fields.get("currentPassword", ""),
            "newPassword": fields.get("newPassword", ""),
        })  # fmt: skip
        assert isinstance(body, ChangePasswordRequest)
        await account_service(ctx, db).change_password(
            visitor.principal, body.current_password, body.new_password, client_ip(request),
            ctx.limiter,
        )  # fmt: skip
    except FormError as exc:
        return await _account(request, visitor, db, errors=exc.by_field, failed="password",
                              status_code=422)  # fmt: skip
    except (ValidationFailed, RateLimited) as exc:
        text = (
            "That is not your current password."
            if exc.code == "wrong_password"
            else as_sentence(exc.detail)
        )
        refused = await _account(request, visitor, db, errors={"currentPassword": text},
                                 failed="password", status_code=exc.status)  # fmt: skip
        refused.headers.update(exc.headers)
        return refused
    visitor.tell("Your password is changed, and you are signed out everywhere else.")
    return see_other("/account#password")


@router.post("/account/sign-out-everywhere")
async def sign_out_everywhere(request: Request) -> Response:
    visitor, db = await visit(request)
    await login_service(get_context(request), db).logout_everywhere(visitor.principal.user.id)
    sessions(request).sign_out(visitor)
    return see_other("/login?signed_out=everywhere")


# -- following the link mailed to a new address -----------------------------------------------


@router.get(CHANGE_PAGE)
async def confirm_email_page(request: Request) -> Response:
    """Where the mail's link lands: a button (a GET changes nothing, so a mail scanner that
    opens links changes no address), or the outcome after it."""
    visitor, _ = await visit(request, signed_in=False)
    token = request.query_params.get("token", "")[:4096]
    changed = request.query_params.get("changed") == "1"
    return page("console/confirm_email.html", visitor, token=token, changed=changed, errors={})


@router.post(CHANGE_PAGE)
async def confirm_email(request: Request) -> Response:
    visitor, db = await visit(request, signed_in=False)
    fields = await form_fields(request)
    token = fields.get("token", "")
    try:
        body = parse_form(EmailChangeConfirm, {"token": token})
        assert isinstance(body, EmailChangeConfirm)
        await email_changes(get_context(request), db).confirm(body.token)
    except (FormError, ValidationFailed):
        return page("console/confirm_email.html", visitor, 422, token=token, changed=False,
                    errors={"form": INVALID_CHANGE_LINK})  # fmt: skip
    except Conflict:
        return page("console/confirm_email.html", visitor, 409, token=token, changed=False,
                    errors={"form": "Another account has taken this address since you asked. "
                            "Sign in and choose another one."})  # fmt: skip
    return see_other(f"{CHANGE_PAGE}?changed=1")


INVALID_CHANGE_LINK = (
    "This link is unknown, more than two days old, already followed, or for a change of address "
    "asked for since. Sign in and ask again on your account page."
)

"""The console: signing up, in and out."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response

from buildbay.auth.dependencies import (
    account_service,
    client_ip,
    email_verifications,
    login_service,
    password_resets,
)
from buildbay.auth.password_reset import RESET_PAGE, ResetLinkState
from buildbay.auth.schemas import (
    EmailVerificationConfirm,
    LoginRequest,
    PasswordResetConfirm,
    PasswordResetRequest,
    RegisterRequest,
)
from buildbay.auth.verification import VERIFY_PAGE
from buildbay.console.pages import (
    ConsoleRoute,
    FormError,
    form_fields,
    now,
    page,
    parse_form,
    safe_next,
    said,
    see_other,
    sentence,
    sessions,
    visit,
)
from buildbay.console.session import Visitor
from buildbay.deps import get_context
from buildbay.errors import BuildbayError, RateLimited, ValidationFailed
from buildbay.sso.policy import SsoOnly

router = APIRouter(route_class=ConsoleRoute, include_in_schema=False)


def _auth_page(
    request: Request, template: str, visitor: Visitor, status_code: int = 200, **context: Any
) -> Response:
    """The sign-in and sign-up pages, which say who may create an account here
    (BUILDBAY_SIGNUP: open, invite-only or closed)."""
    return page(template, visitor, status_code, **sign_in_choices(request), **context)


def sign_in_choices(request: Request) -> dict[str, Any]:
    """What the sign-in pages offer: who may sign up (BUILDBAY_SIGNUP: open, invite-only or
    closed), the identity provider's button (`sso_name`, None without one) and whether it is
    the only way in (`sso_only`, BUILDBAY_OIDC_ONLY: the password forms give way to it)."""
    ctx = get_context(request)
    settings = ctx.settings
    return {
        "signup": settings.signup.value,
        "sso_name": ctx.sso.config.name if ctx.sso is not None else None,
        "sso_only": settings.oidc_only,
    }


@router.get("/")
async def home(request: Request) -> Response:
    visitor, _ = await visit(request, signed_in=False)
    return see_other("/projects" if visitor.user else "/login")


@router.get("/login")
async def login_page(request: Request) -> Response:
    visitor, _ = await visit(request, signed_in=False)
    next_page = safe_next(request.query_params.get("next"))
    if visitor.user is not None:
        return see_other(next_page)
    return _auth_page(
        request,
        "console/login.html",
        visitor,
        next=next_page,
        values={},
        errors={},
        signed_out=request.query_params.get("signed_out"),
        reset=request.query_params.get("reset"),
        break_glass=request.query_params.get("break_glass") == "1",
    )


@router.post("/login")
async def login(request: Request) -> Response:
    visitor, db = await visit(request, signed_in=False)
    fields = await form_fields(request)
    next_page = safe_next(fields.get("next"))
    values = {"email": fields.get("email", "")}
    ctx = get_context(request)
    try:
        body = parse_form(LoginRequest, {k: fields.get(k, "") for k in ("email", "password")})
        assert isinstance(body, LoginRequest)
        service = login_service(ctx, db)
        issued = await service.login(body.email, body.password, client_ip(request), ctx.limiter)
    except FormError as exc:
        return _auth_page(
            request,
            "console/login.html",
            visitor,
            422,
            next=next_page,
            values=values,
            errors=exc.by_field,
            break_glass=True,
        )
    except BuildbayError as exc:
        status = exc.status if exc.status in (401, 403, 429) else 400
        refused = _auth_page(
            request,
            "console/login.html",
            visitor,
            status,
            next=next_page,
            values=values,
            errors={"form": sentence(said(exc))},
            break_glass=exc.code != "sso_only",
        )
        refused.headers.update(exc.headers)  # Retry-After, when throttled
        return refused
    if visitor.session_id is not None:  # signing in again: the old login ends
        await login_service(ctx, db).end_session(visitor.session_id)
    await sessions(request).sign_in(visitor, db, issued.session_id, now(request))
    return see_other(next_page)


@router.get("/signup")
async def signup_page(request: Request) -> Response:
    visitor, _ = await visit(request, signed_in=False)
    query = request.query_params
    next_page = safe_next(query.get("next")) if query.get("next") else ""
    # Prefilled from an invitation's page: the invited address.
    values = {"email": query.get("email", "")[:320]}
    return _auth_page(
        request, "console/signup.html", visitor, values=values, errors={}, next=next_page
    )


@router.post("/signup")
async def signup(request: Request) -> Response:
    visitor, db = await visit(request, signed_in=False)
    fields = await form_fields(request)
    values = {"email": fields.get("email", ""), "name": fields.get("name", "")}
    next_page = safe_next(fields.get("next")) if fields.get("next") else ""
    try:
        body = parse_form(RegisterRequest, {k: fields.get(k) or None for k in ("email", "name")}
                      | {"password": fields.get("password", "")})  # fmt: skip
        assert isinstance(body, RegisterRequest)
        issued = await account_service(get_context(request), db).register(
            body.email, body.password, body.name
        )
    except FormError as exc:
        return _auth_page(
            request,
            "console/signup.html",
            visitor,
            422,
            values=values,
            errors=exc.by_field,
            next=next_page,
        )
    except BuildbayError as exc:
        await db.rollback()  # a concurrent sign-up's failed flush: nothing of this one stays
        reason = sentence(said(exc))
        errors = {"email": reason} if exc.code == "email_taken" else {"form": reason}
        return _auth_page(
            request,
            "console/signup.html",
            visitor,
            exc.status,
            values=values,
            errors=errors,
            next=next_page,
        )
    await sessions(request).sign_in(visitor, db, issued.session_id, now(request))
    return see_other(next_page or "/projects?welcome=1")


@router.post("/logout")
async def logout(request: Request) -> Response:
    visitor, db = await visit(request, signed_in=False)
    if visitor.session_id is not None:
        await login_service(get_context(request), db).end_session(visitor.session_id)
    sessions(request).sign_out(visitor)
    return see_other("/login?signed_out=1")


# -- a forgotten password ---------------------------------------------------------------------


@router.get("/forgot-password")
async def forgot_password_page(request: Request) -> Response:
    visitor, _ = await visit(request, signed_in=False)
    return page("console/forgot_password.html", visitor, values={}, errors={},
                sent=request.query_params.get("sent"), **sign_in_choices(request))  # fmt: skip


@router.post("/forgot-password")
async def forgot_password(request: Request) -> Response:
    visitor, db = await visit(request, signed_in=False)
    fields = await form_fields(request)
    values = {"email": fields.get("email", "")}
    ctx = get_context(request)
    try:
        body = parse_form(PasswordResetRequest, values)
        assert isinstance(body, PasswordResetRequest)
        await password_resets(get_context(request), db).request(
            str(body.email), client_ip(request), ctx.limiter
        )
    except FormError:
        errors = {"email": "Enter the e-mail address of your account."}
        return page("console/forgot_password.html", visitor, 422, values=values, errors=errors,
                    **sign_in_choices(request))  # fmt: skip
    except SsoOnly as exc:
        return page("console/forgot_password.html", visitor, 403, values=values,
                    errors={"form": sentence(exc.detail)}, **sign_in_choices(request))  # fmt: skip
    except RateLimited as exc:
        refused = page("console/forgot_password.html", visitor, 429, values=values,
                       errors={"form": exc.detail + "."}, **sign_in_choices(request))  # fmt: skip
        refused.headers.update(exc.headers)
        return refused
    return see_other("/forgot-password?sent=1")


@router.get(RESET_PAGE)
async def reset_password_page(request: Request) -> Response:
    visitor, db = await visit(request, signed_in=False)
    token = request.query_params.get("token", "")[:4096]
    # Said before the form: nobody chooses a password for a link that cannot take it.
    state = await password_resets(get_context(request), db).link_state(token)
    if state is not ResetLinkState.USABLE:
        status = 404 if state is ResetLinkState.UNKNOWN else 410
        return page("console/reset_password.html", visitor, status, token="",
                    errors={"form": RESET_LINK_SAYS[state]})  # fmt: skip
    return page("console/reset_password.html", visitor, token=token, errors={})


@router.post(RESET_PAGE)
async def reset_password(request: Request) -> Response:
    visitor, db = await visit(request, signed_in=False)
    fields = await form_fields(request)
    token = fields.get("token", "")
    try:
        body = parse_form(
            PasswordResetConfirm, {"token": token, "password": fields.get("password", "")}
        )
        assert isinstance(body, PasswordResetConfirm)
        service = account_service(get_context(request), db)
        await password_resets(get_context(request), db).confirm(body.token, body.password, service)
    except FormError as exc:
        errors = {"password": "Choose a password of 8 to 128 characters."}
        if "token" in exc.by_field:
            errors = {"form": INVALID_RESET_LINK}
        return page("console/reset_password.html", visitor, 422, token=token, errors=errors)
    except ValidationFailed:  # invalid_token
        return page("console/reset_password.html", visitor, 422, token=token,
                    errors={"form": INVALID_RESET_LINK})  # fmt: skip
    sessions(request).sign_out(visitor)  # whatever login this browser had has ended
    return see_other("/login?reset=1")


INVALID_RESET_LINK = (
    "This link is unknown, was used already or is more than an hour old. Ask for a new one."
)
RESET_LINK_SAYS = {
    ResetLinkState.USED: "This link was used already: the account's password was set with it, "
    "or with a newer link. Sign in with that password, or ask for a new link.",
    ResetLinkState.EXPIRED: "This link is more than an hour old and no longer works. Ask for a "
    "new one.",
    ResetLinkState.UNKNOWN: "This link is not one Buildbay sent: it may have been cut short or "
    "mistyped. Open it again from the mail, or ask for a new one.",
}


# -- proving the e-mail address -----------------------------------------------------------------


@router.get(VERIFY_PAGE)
async def verify_email_page(request: Request) -> Response:
    """Where the verification mail's link lands: a button (a GET changes nothing, so a mail
    scanner that opens links proves nothing by itself), or the outcome after it."""
    visitor, _ = await visit(request, signed_in=False)
    token = request.query_params.get("token", "")[:4096]
    verified = request.query_params.get("verified") == "1"
    return page("console/verify_email.html", visitor, token=token, verified=verified, errors={})


@router.post(VERIFY_PAGE)
async def verify_email(request: Request) -> Response:
    visitor, db = await visit(request, signed_in=False)
    fields = await form_fields(request)
    token = fields.get("token", "")
    try:
        body = parse_form(EmailVerificationConfirm, {"token": token})
        assert isinstance(body, EmailVerificationConfirm)
        await email_verifications(get_context(request), db).confirm(body.token)
    except (FormError, ValidationFailed):
        return page("console/verify_email.html", visitor, 422, token=token, verified=False,
                    errors={"form": INVALID_VERIFICATION_LINK})  # fmt: skip
    return see_other(f"{VERIFY_PAGE}?verified=1")


INVALID_VERIFICATION_LINK = (
    "This link is unknown or more than a week old. Sign in and ask for a new one on your "
    "account page."
)

"""The console: public join links (issue 40). The page a group's link opens (`/join/{token}`),
where anyone gives an e-mail address and is mailed a confirmation link; the page that link
opens (`/join-confirm/{token}`), whose button joins the group (a GET joins nobody: mail
scanners open links); and the group page's forms that make and revoke a link. The services
decide (distribution/join_links.py); these pages say what happened in sentences."""

from __future__ import annotations

from datetime import UTC, datetime

from fastapi import APIRouter, Request, Response
from limits import RateLimitItemPerMinute
from pydantic import BaseModel

from buildbay.auth.dependencies import client_ip, login_service
from buildbay.auth.models import User
from buildbay.console.groups import groups_path, render_groups
from buildbay.console.pages import (
    ConsoleRoute,
    FormError,
    form_fields,
    now,
    page,
    parse_form,
    said,
    see_other,
    sessions,
    visit,
)
from buildbay.console.shown_once import Shown, keep
from buildbay.db.reads import Reads
from buildbay.deps import get_context
from buildbay.distribution.dependencies import join_links
from buildbay.distribution.join_links import (
    CONFIRM_PAGE,
    JOIN_PAGE,
    MAX_DOMAINS,
    JoinOutcome,
    LinkState,
    state_sentence,
)
from buildbay.errors import BuildbayError, NotFound, RateLimited
from buildbay.projects.authorization import project_of
from buildbay.projects.enums import ProjectRole
from buildbay.schemas import Email

router = APIRouter(route_class=ConsoleRoute, include_in_schema=False)

# Opening a join page: per client IP (a link posted publicly is opened by many, each once).
PAGES_PER_IP = RateLimitItemPerMinute(60)


class _JoinForm(BaseModel):
    email: Email


async def _throttled(request: Request) -> int | None:
    ctx = get_context(request)
    return await ctx.limiter.throttle("join-page-ip", client_ip(request), PAGES_PER_IP)


@router.get(JOIN_PAGE + "/{token}")
async def join_page(request: Request, token: str) -> Response:
    visitor, db = await visit(request, signed_in=False)
    if (wait := await _throttled(request)) is not None:
        refused = page("console/join.html", visitor, 429, shown=None, state=None, values={},
                       errors={"form": "Too many pages opened from here; wait a minute and "
                               "try again."})  # fmt: skip
        refused.headers["Retry-After"] = str(wait)
        return refused
    try:
        shown = await join_links(get_context(request), db).page(token)
    except NotFound:
        return page("console/join.html", visitor, 404, shown=None, state=None, values={},
                    errors={})  # fmt: skip
    state = shown.link.state
    status = 200 if state is LinkState.LIVE else 410
    here = f"{JOIN_PAGE}/{token}"
    return page("console/join.html", visitor, status, shown=shown, state=state.value,
                said=state_sentence(state), values={}, errors={}, here=here)  # fmt: skip


@router.post(JOIN_PAGE + "/{token}")
async def join_request(request: Request, token: str) -> Response:
    visitor, db = await visit(request, signed_in=False)
    fields = await form_fields(request)
    values = {"email": fields.get("email", "")}
    service = join_links(get_context(request), db)
    here = f"{JOIN_PAGE}/{token}"
    try:
        shown = await service.page(token)
    except NotFound:
        return page("console/join.html", visitor, 404, shown=None, state=None, values={},
                    errors={})  # fmt: skip
    state = shown.link.state

    def again(status: int, error: str) -> Response:
        return page("console/join.html", visitor, status, shown=shown, state=state.value,
                    said=state_sentence(state), values=values, errors={"email": error},
                    here=here)  # fmt: skip

    try:
        body = parse_form(_JoinForm, values)
        assert isinstance(body, _JoinForm)
        async with db.begin_nested():
            await service.request(
                token, str(body.email), client_ip(request), get_context(request).limiter
            )
    except FormError as exc:
        return again(422, exc.by_field.get("email") or "Enter your e-mail address.")
    except RateLimited as exc:
        refused = again(429, exc.detail + ".")
        refused.headers.update(exc.headers)
        return refused
    except BuildbayError as exc:
        if exc.status >= 500:
            raise
        return again(exc.status, said(exc))
    return page("console/join.html", visitor, 200, shown=shown, state="sent", values={},
                errors={}, here=here)  # fmt: skip


@router.get(CONFIRM_PAGE + "/{token}")
async def confirm_page(request: Request, token: str) -> Response:
    visitor, db = await visit(request, signed_in=False)
    shown = await join_links(get_context(request), db).confirmation(token)
    if shown is None:
        return page("console/join_confirm.html", visitor, 410, shown=None, token="")
    return page("console/join_confirm.html", visitor, 200, shown=shown, token=token)


@router.post(CONFIRM_PAGE + "/{token}")
async def confirm(request: Request, token: str) -> Response:
    visitor, db = await visit(request, signed_in=False)
    ctx = get_context(request)
    try:
        async with db.begin_nested():  # a refusal takes back the claim of the mail's link
            signed_in_as = visitor.user.id if visitor.user is not None else None
            joined = await join_links(ctx, db).confirm(token, signed_in_as)
    except BuildbayError as exc:
        if exc.status >= 500:
            raise
        return page("console/join_confirm.html", visitor, exc.status, shown=None, token="",
                    error=said(exc))  # fmt: skip
    project_page = f"/projects/{joined.project_id}"
    if joined.outcome is JoinOutcome.ALREADY:
        visitor.tell(f"You are in the group {joined.group_name} already: its builds are here.")
    else:
        visitor.tell(f"Welcome to {joined.project_name}: you are a tester in the group "
                     f"{joined.group_name}. Its builds are here.")  # fmt: skip
    if visitor.user is not None and visitor.user.id == joined.user_id:
        return see_other(project_page)
    if joined.new_account:
        # Made by this confirmation, which the mail proved: signed in on this browser, no
        # password needed until they want one (Forgot password sets it).
        if visitor.session_id is not None:
            await login_service(ctx, db).end_session(visitor.session_id)
        user = await db.get_one(User, joined.user_id)
        issued = await login_service(ctx, db).start_session(user, user.credentials_epoch)
        await sessions(request).sign_in(visitor, db, issued.session_id, now(request))
        return see_other(project_page)
    # An account of its own: its owner signs in (BUILDBAY_OIDC_ONLY: through the provider,
    # since Forgot password is off there).
    if ctx.settings.oidc_only:
        visitor.tell(f"{visitor.told} Sign in with {ctx.settings.oidc_button_name} to install "
                     "them.")  # fmt: skip
    else:
        visitor.tell(f"{visitor.told} Sign in to install them (no password yet? Use Forgot "
                     "your password to choose one).")  # fmt: skip
    return see_other(f"/login?next={project_page}")


# -- the group page's forms -------------------------------------------------------------------


@router.post("/projects/{project_id}/groups/{group_id}/join-link")
async def create_link(request: Request, project_id: str, group_id: str) -> Response:
    visitor, db = await visit(request)
    access = await project_of(
        Reads.within(db), visitor.principal, project_id, ProjectRole.DEVELOPER
    )
    fields = await form_fields(request)
    ctx = get_context(request)
    errors: dict[str, str] = {}
    max_text = fields.get("maxTesters", "").strip()
    max_testers = None
    if max_text:
        if not max_text.isdigit() or not 1 <= int(max_text) <= 10000:
            errors["maxTesters"] = "Enter a whole number from 1 to 10,000, or leave it empty."
        else:
            max_testers = int(max_text)
    domains = [d for d in fields.get("domains", "").replace(",", " ").split() if d]
    expires_text = fields.get("expiresOn", "").strip()
    expires_at = None
    if expires_text:
        try:
            day = datetime.strptime(expires_text, "%Y-%m-%d").replace(tzinfo=UTC)
            expires_at = day.replace(hour=23, minute=59, second=59)
        except ValueError:
            errors["expiresOn"] = "Enter a date such as 2030-01-31, or leave it empty."
    if not errors:
        try:
            async with db.begin_nested():
                _, token = await join_links(ctx, db).create(
                    access, group_id, max_testers, domains, expires_at
                )
        except BuildbayError as exc:
            if exc.status >= 500 or exc.status == 404:
                raise
            errors.update(_form_errors(exc, domains))
    if errors:
        return await render_groups(request, visitor, db, project_id, f"link-{group_id}",
                                   errors, fields, 422)  # fmt: skip
    await keep(sessions(request), visitor, db, now(request), Shown.JOIN_LINK, group_id,
               f"{ctx.settings.resolved_public_url}{JOIN_PAGE}/{token}")  # fmt: skip
    visitor.tell("Join link made. Copy it now: it is shown this once.")
    return see_other(groups_path(project_id, group_id))


def _form_errors(exc: BuildbayError, domains: list[str]) -> dict[str, str]:
    """The service's refusal, said beside the field of the form it is about."""
    for error in exc.errors or []:
        if error.field == "expiresAt":
            return {"expiresOn": "Choose a day after today, or leave it empty."}
        if error.field == "allowedEmailDomains":
            return {"domains": f"Enter at most {MAX_DOMAINS} domains."}
        if error.field.startswith("allowedEmailDomains["):
            n = int(error.field.removeprefix("allowedEmailDomains[").rstrip("]"))
            return {"domains": f"{domains[n]} is not a domain name such as example.com."}
    return {"domains": said(exc)}


@router.post("/projects/{project_id}/groups/{group_id}/join-link/revoke")
async def revoke_link(request: Request, project_id: str, group_id: str) -> Response:
    visitor, db = await visit(request)
    access = await project_of(
        Reads.within(db), visitor.principal, project_id, ProjectRole.DEVELOPER
    )
    await join_links(get_context(request), db).revoke(access.project, group_id)
    visitor.tell("Join link revoked: its page now says it no longer works.")
    return see_other(groups_path(project_id, group_id))

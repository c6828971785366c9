"""The console: signing in through the company's identity provider (OpenID Connect), and a
project's mapping of the provider's groups to roles.

`/auth/sso/start` makes the flow's secrets (state, nonce, PKCE verifier), keeps them in a cookie
of this browser (`bb_sso`, HttpOnly, SameSite=Lax, ten minutes, sealed with an HMAC of the
server's key: nobody can write one) and sends the browser to the provider. `/auth/sso/callback`
takes the provider's answer only with that cookie and its state: a callback replayed in another
browser, or one an attacker sends a victim to (login CSRF), finds no cookie or another state,
and is refused. The cookie is spent by the callback, whatever its outcome.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from dataclasses import dataclass
from urllib.parse import quote

from fastapi import APIRouter, Request, Response

from buildbay.auth.dependencies import limit_by_ip, login_service, origin_of
from buildbay.auth.tokens import derive_key
from buildbay.console.pages import (
    ConsoleRoute,
    FormError,
    can,
    form_fields,
    now,
    page,
    safe_next,
    see_other,
    sessions,
    visit,
)
from buildbay.console.session import Visitor
from buildbay.constant_time import same_secret
from buildbay.context import AppContext
from buildbay.db.reads import Reads
from buildbay.deps import get_context
from buildbay.errors import NotFound
from buildbay.projects.authorization import ProjectAccess, project_of
from buildbay.projects.enums import ProjectRole
from buildbay.sso.groups import GroupMapping, read_mappings, replace_mappings
from buildbay.sso.limits import MAX_GROUP_NAME, MAX_MAPPINGS
from buildbay.sso.provider import FlowSecrets, SignInFailed, SsoProvider
from buildbay.sso.signin import SsoSignIns
from buildbay.text import encoded_word_problem, shown_text_problem

router = APIRouter(route_class=ConsoleRoute, include_in_schema=False)

START = "/auth/sso/start"
CALLBACK = "/auth/sso/callback"
FLOW_COOKIE = "bb_sso"
FLOW_SECONDS = 600


@dataclass(frozen=True, slots=True)
class _Flow:
    secrets: FlowSecrets
    next: str
    started: int  # seconds since the epoch


class _FlowCookie:
    def __init__(self, master_key: bytes, *, secure: bool) -> None:
        self._key = derive_key(master_key, "console-sso-flow")
        self.name = ("__Host-" if secure else "") + FLOW_COOKIE

    def _mac(self, payload: bytes) -> str:
        return hmac.new(self._key, payload, hashlib.sha256).hexdigest()

    def seal(self, flow: _Flow) -> str:
        s = flow.secrets
        payload = json.dumps([s.state, s.nonce, s.code_verifier, flow.next, flow.started])
        encoded = base64.urlsafe_b64encode(payload.encode()).rstrip(b"=").decode()
        return f"{encoded}.{self._mac(payload.encode())}"

    def unseal(self, sealed: str | None, at: int) -> _Flow | None:
        if not sealed or len(sealed) > 2048:
            return None
        encoded, _, mac = sealed.partition(".")
        try:
            payload = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))
        except ValueError:
            return None
        if not same_secret(mac, self._mac(payload)):
            return None
        state, nonce, verifier, next_page, started = json.loads(payload)
        if not 0 <= at - started <= FLOW_SECONDS:
            return None
        return _Flow(FlowSecrets(state, nonce, verifier), next_page, started)


def _provider(ctx: AppContext) -> SsoProvider:
    if ctx.sso is None:
        raise NotFound("This server has no identity provider to sign in with", code="no_sso")
    return ctx.sso


def _cookie(request: Request) -> _FlowCookie:
    ctx = get_context(request)
    return _FlowCookie(ctx.settings.signing_key, secure=sessions(request).secure)


def _redirect_uri(ctx: AppContext) -> str:
    return f"{ctx.settings.resolved_public_url}{CALLBACK}"


@router.get(START)
async def start(request: Request) -> Response:
    visitor, _ = await visit(request, signed_in=False)
    ctx = get_context(request)
    provider = _provider(ctx)
    # Each start costs a request to the provider (its discovery document, when stale): counted
    # per client address, as the API's anonymous requests are.
    await limit_by_ip(ctx, request)
    next_page = safe_next(request.query_params.get("next"))
    flow = _Flow(FlowSecrets.new(), next_page, int(now(request).timestamp()))
    try:
        url = await provider.authorization_url(_redirect_uri(ctx), flow.secrets)
    except SignInFailed as failed:
        visitor.tell(failed.reason)
        return see_other(f"/login?next={quote(next_page, safe='/')}")
    cookie = _cookie(request)
    visitor.cookies[cookie.name] = (cookie.seal(flow), FLOW_SECONDS)
    return see_other(url)


@router.get(CALLBACK)
async def callback(request: Request) -> Response:
    visitor, db = await visit(request, signed_in=False)
    ctx = get_context(request)
    provider = _provider(ctx)
    # Each callback writes (an audit entry, refused or not) and may call the provider: counted
    # per client address, so a stream of forged callbacks cannot flood the log.
    await limit_by_ip(ctx, request)
    query = request.query_params
    cookie = _cookie(request)
    flow = cookie.unseal(request.cookies.get(cookie.name), int(now(request).timestamp()))
    visitor.cookies[cookie.name] = ("", 0)  # spent, whatever happens next
    service = SsoSignIns(
        db, now(request), provider.config, login_service(ctx, db), ctx.settings.signup,
        origin_of(request),
    )  # fmt: skip
    name = provider.config.name
    claims = None
    try:
        state = query.get("state", "")
        ours = flow is not None and bool(state) and same_secret(state, flow.secrets.state)
        # An error answer with this flow's state is the provider's (RFC 6749 4.1.2.1 sends the
        # state back; some providers leave it out): without it, only the RFC's codes, each a
        # sentence of ours, are told, never wording that whoever wrote the link chose.
        if "error" in query and (ours or query.get("error") in _KNOWN_ERRORS):
            raise _provider_error(name, query.get("error", "")[:100])
        if not ours:
            raise SignInFailed(
                "This sign-in was not started in this browser, or took more than ten minutes. "
                f"Start again with “Sign in with {name}”.",
                "state_mismatch",
            )
        assert flow is not None  # `ours` says so
        code = query.get("code", "")
        if not code or len(code) > 2048:
            raise SignInFailed(f"{name} sent no authorization code. Start again.", "no_code")
        claims = await provider.identity(code, _redirect_uri(ctx), flow.secrets)
        signed = await service.sign_in(claims)
    except SignInFailed as failed:
        await db.rollback()  # nothing of the refused sign-in stays but its audit entry
        service.record_failure(failed, claims)
        visitor.tell(failed.reason)
        target = flow.next if flow else "/projects"
        return see_other(f"/login?next={quote(target, safe='/')}")
    if visitor.session_id is not None:  # signing in again: the old login ends
        await login_service(ctx, db).end_session(visitor.session_id)
    await sessions(request).sign_in(visitor, db, signed.tokens.session_id, now(request))
    if signed.invited:
        visitor.tell(
            f"A project invited {signed.user.email}: accept or decline the invitation below."
        )
        return see_other("/projects#received-invitations")
    return see_other(flow.next if flow else "/projects")


_KNOWN_ERRORS = frozenset({
    "access_denied", "login_required", "interaction_required", "consent_required",
    "temporarily_unavailable",
})  # fmt: skip


def _provider_error(name: str, error: str) -> SignInFailed:
    """The provider's `error` (RFC 6749 4.1.2.1) as a sentence."""
    if error == "access_denied":
        return SignInFailed(
            f"The sign-in was cancelled at {name}, or {name} does not let your account use "
            "Buildbay. Ask your administrator if you should have access.",
            "access_denied",
        )
    if error in ("login_required", "interaction_required", "consent_required"):
        return SignInFailed(f"{name} needs you to sign in there first. Start again.", error)
    if error == "temporarily_unavailable":
        return SignInFailed(f"{name} is unavailable right now. Try again in a moment.", error)
    return SignInFailed(
        f"{name} refused the sign-in ({error or 'no reason given'}). Tell the operator of this "
        "server if it goes on.",
        "provider_error",
        error,
    )


# -- a project's group mapping -------------------------------------------------------------------

ROLE_NAMES = ("tester", "developer", "admin")


@router.get("/projects/{project_id}/sso-groups")
async def groups_page(request: Request, project_id: str) -> Response:
    visitor, db = await visit(request)
    access = await project_of(Reads.within(db), visitor.principal, project_id, ProjectRole.ADMIN)
    mappings = await read_mappings(Reads.within(db), project_id)
    text = "\n".join(f"{m.group}, {m.role.value}" for m in mappings)
    return _groups_page(request, visitor, access, mappings, text, {})


def _groups_page(
    request: Request,
    visitor: Visitor,
    access: ProjectAccess,
    mappings: list[GroupMapping],
    text: str,
    errors: dict[str, str],
    status_code: int = 200,
) -> Response:
    ctx = get_context(request)
    return page(
        "console/sso_groups.html", visitor, status_code,
        project=access.project, role=access.role, can=can(access.role),
        mappings=mappings, text=text, errors=errors,
        claim=ctx.settings.oidc_groups_claim, provider=ctx.sso.config.name if ctx.sso else None,
    )  # fmt: skip


@router.post("/projects/{project_id}/sso-groups")
async def save_groups(request: Request, project_id: str) -> Response:
    visitor, db = await visit(request)
    access = await project_of(Reads.within(db), visitor.principal, project_id, ProjectRole.ADMIN)
    text = (await form_fields(request)).get("mappings", "")
    try:
        mappings = parse_mappings(text)
    except FormError as exc:
        current = await read_mappings(Reads.within(db), project_id)
        return _groups_page(request, visitor, access, current, text, exc.by_field, 422)
    saved = await replace_mappings(db, now(request), access, mappings, origin_of(request))
    visitor.tell(
        f"Group mapping saved ({len(saved)} group{'s' if len(saved) != 1 else ''}). Members "
        "follow it at their next sign-in."
    )
    return see_other(f"/projects/{project_id}/sso-groups")


def parse_mappings(text: str) -> list[GroupMapping]:
    """One `group, role` a line; blank lines skipped."""
    found: list[GroupMapping] = []
    seen: set[str] = set()
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        group, comma, role = line.rpartition(",")
        group, role = group.strip(), role.strip().lower()
        if not comma or not group:
            raise _bad(f"Line {number} is not “group, role”, like “mobile-team, developer”.")
        if role not in ROLE_NAMES:
            raise _bad(
                f"Line {number}: the role is tester, developer or admin (owner is given by "
                "hand only)."
            )
        # The API's rule (sso/schemas.py GroupName: a shown name), written once in text.py.
        if problem := shown_text_problem(group, MAX_GROUP_NAME) or encoded_word_problem(group):
            raise _bad(f"Line {number}: the group name {problem}.")
        if group in seen:
            raise _bad(f"Line {number}: the group {group} is named twice.")
        seen.add(group)
        found.append(GroupMapping(group, ProjectRole(role)))
    if len(found) > MAX_MAPPINGS:
        raise _bad(f"A project maps at most {MAX_MAPPINGS} groups.")
    return found


def _bad(message: str) -> FormError:
    return FormError({"mappings": message})

"""The console's side of the command line's sign-in (auth/cli_sign_in.py): the page a loopback
sign-in opens in the browser (`/cli/authorize`), and the page where a device sign-in's code is
entered (`/cli/device`). Whoever is not signed in signs in first (a password, or the company's
identity provider) and comes back to the same address."""

from __future__ import annotations

from urllib.parse import quote, urlsplit

from fastapi import APIRouter, Request, Response

from buildbay.auth.cli_sign_in import (
    AUTHORIZE_PAGE,
    CLI_TOKEN_DAYS,
    DEVICE_PAGE,
    CliSignIns,
    LoopbackRequest,
)
from buildbay.auth.dependencies import cli_sign_ins, client_ip
from buildbay.console.pages import ConsoleRoute, form_fields, page, see_other, sentence, visit
from buildbay.deps import get_context, request_session
from buildbay.errors import NotFound
from buildbay.security_headers import SecurityHeaders

router = APIRouter(route_class=ConsoleRoute, include_in_schema=False)

MAX_ASKED = 2048  # the characters of a sign-in link's query the page reads


def _back_after_sign_in(request: Request) -> Response:
    """To the sign-in page, and back here with the same query afterwards."""
    here = request.url.path + (f"?{request.url.query[:MAX_ASKED]}" if request.url.query else "")
    return see_other(f"/login?next={quote(here, safe='')}")


def _service(request: Request) -> CliSignIns:
    return cli_sign_ins(get_context(request), request_session(request))


@router.get(AUTHORIZE_PAGE)
async def authorize_page(request: Request) -> Response:
    visitor, _ = await visit(request, signed_in=False)
    # Checked before anything else: a link that would send the answer elsewhere than this
    # computer is refused with a page, never followed (nor sent through the sign-in page).
    asked = LoopbackRequest.of(dict(request.query_params))
    if visitor.user is None:
        return _back_after_sign_in(request)
    answer = page("console/cli_authorize.html", visitor, asked=asked, days=CLI_TOKEN_DAYS)
    # The form's answer redirects to the command line's loopback: a browser enforces the
    # policy's form-action on that redirect too, so this page allows exactly that origin.
    parts = urlsplit(asked.redirect_uri)
    policy = SecurityHeaders(get_context(request).settings).page_policy(
        form_targets=(f"{parts.scheme}://{parts.netloc}",)
    )
    answer.headers["Content-Security-Policy"] = policy
    return answer


@router.post(AUTHORIZE_PAGE)
async def authorize(request: Request) -> Response:
    visitor, _ = await visit(request)
    fields = await form_fields(request)
    asked = LoopbackRequest.of(fields)
    if fields.get("decision") != "allow":
        return see_other(asked.redirect(error="access_denied"))  # RFC 6749 §4.1.2.1
    code = await _service(request).approve_loopback(visitor.principal.user, asked)
    return see_other(asked.redirect(code=code))


@router.get(DEVICE_PAGE)
async def device_page(request: Request) -> Response:
    visitor, _ = await visit(request, signed_in=False)
    if visitor.user is None:
        return _back_after_sign_in(request)
    query = request.query_params
    done = query.get("done")
    entered = query.get("code", "")[:64]
    if done in ("allowed", "denied") or not entered:
        return page("console/cli_device.html", visitor, done=done, waiting=None,
                    code="", errors={}, days=CLI_TOKEN_DAYS)  # fmt: skip
    ctx = get_context(request)
    waiting = await _service(request).waiting_device(
        entered, visitor.principal.user, client_ip(request), ctx.limiter
    )
    if waiting is None:
        return page("console/cli_device.html", visitor, 404, done=None, waiting=None,
                    code=entered, errors={"code": sentence(NO_SUCH_CODE)},
                    days=CLI_TOKEN_DAYS)  # fmt: skip
    return page("console/cli_device.html", visitor, done=None, waiting=waiting, code=entered,
                errors={}, days=CLI_TOKEN_DAYS)  # fmt: skip


@router.post(DEVICE_PAGE)
async def device_decision(request: Request) -> Response:
    visitor, _ = await visit(request)
    fields = await form_fields(request)
    allow = fields.get("decision") == "allow"
    ctx = get_context(request)
    try:
        await _service(request).decide_device(
            fields.get("code", "")[:64], visitor.principal.user, allow, client_ip(request),
            ctx.limiter,
        )  # fmt: skip
    except NotFound as exc:
        return page("console/cli_device.html", visitor, 404, done=None, waiting=None,
                    code=fields.get("code", "")[:64], errors={"code": sentence(exc.detail)},
                    days=CLI_TOKEN_DAYS)  # fmt: skip
    return see_other(f"{DEVICE_PAGE}?done={'allowed' if allow else 'denied'}")


NO_SUCH_CODE = (
    "No command line waits for this code: it may be mistyped, used already or more than ten "
    "minutes old. Check the code your terminal shows, or run `buildbay login --sso` again"
)

"""What every console page shares: the route class that turns refusals into pages (or problem
+json for the page's script), the visitor and its checks (origin, rate limit, CSRF), forms and
their errors. The pages themselves are one module per area: auth, projects, builds, account."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from datetime import timedelta
from typing import Any, ClassVar, TypeVar
from urllib.parse import quote

from fastapi import Request, Response
from fastapi.responses import RedirectResponse
from pydantic import BaseModel
from pydantic import ValidationError as ModelError
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.auth.dependencies import count_request, limit_by_ip
from buildbay.console.session import CSRF_FIELD, CSRF_HEADER, ConsoleSessions, Visitor
from buildbay.db.reads import Reads
from buildbay.deps import TransactionRoute, get_context, request_session
from buildbay.errors import (
    BadRequest,
    BuildbayError,
    FieldError,
    NotAuthenticated,
    PayloadTooLarge,
    ValidationFailed,
)
from buildbay.numbers import whole_number
from buildbay.problems import allowed_methods, problem_response
from buildbay.projects.authorization import ApplicationAccess, application_of
from buildbay.projects.enums import ProjectRole
from buildbay.schemas import page_of
from buildbay.templates import CONSOLE, render

ROLES = [role.value for role in ProjectRole]
M = TypeVar("M", bound=BaseModel)


class ConsoleRoute(TransactionRoute):
    """A console page: the request's transaction as for the API; a visitor who is not signed in
    goes to the login page; any other refusal is an HTML page with its status; the visitor's
    cookies are set on whatever is answered."""

    answers_json: ClassVar[bool] = False

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def page(request: Request) -> Response:
            try:
                response = await handler(request)
            except BuildbayError as exc:
                response = _refusal(request, exc, as_json=self.answers_json)
            visitor: Visitor | None = request.scope.get("buildbay.visitor")
            if visitor is not None:
                sessions(request).apply(visitor, response)
            return response

        return page


class ConsoleJsonRoute(ConsoleRoute):
    """A console endpoint of JSON for the pages' scripts (the browser upload): a refusal is
    problem+json, as the API's, whatever the request sent."""

    answers_json = True


def _refusal(request: Request, exc: BuildbayError, *, as_json: bool) -> Response:
    """What a refused console request answers: problem+json to a script; to a person, the login
    page when not signed in, else a page that says what went wrong."""
    if as_json:
        return problem_response(
            request, exc.status, exc.code, exc.detail, headers=exc.headers, errors=exc.errors,
            extensions=exc.extensions,
        )  # fmt: skip
    if isinstance(exc, NotAuthenticated):
        target = quote(request.url.path, safe="/")
        return RedirectResponse(f"/login?next={target}", status_code=303)
    return render(
        "console/error.html",
        exc.status,
        headers=CONSOLE | exc.headers,
        title=_error_title(exc.status),
        detail=said(exc),
        visitor=request.scope.get("buildbay.visitor"),
    )


def browser_error(request: Request, status: int) -> Response | None:
    """What a browser gets for a console address no route answers, instead of problem+json: a
    GET of an address that only takes a form (reloading after a POST, a bookmark) goes to the
    page the form is on, the nearest address above it that is a page; an address that does
    not exist is a page that says so. None for the API, the storage and other clients."""
    path = request.url.path
    if (
        request.method not in ("GET", "HEAD")
        or "text/html" not in request.headers.get("accept", "")
        or path.startswith(NOT_PAGES)
        or status not in (404, 405)
    ):
        return None
    if status == 405:
        above = path.rstrip("/")
        while above:
            above = above.rsplit("/", 1)[0]
            if "GET" in allowed_methods(request.app, above or "/"):
                return RedirectResponse(above or "/", status_code=303)
    return render(
        "console/error.html",
        404,
        headers=CONSOLE,
        title=_error_title(404),
        detail="There is no page at this address. It may have been deleted, or the link may be "
        "mistyped.",
        visitor=None,
    )


# Addresses that answer machines: their errors stay problem+json whatever the Accept header.
NOT_PAGES = ("/api/", "/storage/", "/openapi.json", "/healthz", "/readyz")


def _error_title(status: int) -> str:
    return {403: "Not allowed", 404: "Not found", 409: "Not possible now", 413: "Too large",
            429: "Too many requests"}.get(status, "Something went wrong")  # fmt: skip


def sessions(request: Request) -> ConsoleSessions:
    console: ConsoleSessions = request.app.state.console
    return console


MAX_FORM_BYTES = 64 * 1024


async def visit(request: Request, *, signed_in: bool = True) -> tuple[Visitor, AsyncSession]:
    """The visitor (signed in, unless `signed_in` is False) and the request's session. A POST
    is checked before its body is read (origin, size), then counted against the rate limit as
    an API request would be, then its CSRF token is checked."""
    ctx = get_context(request)
    db = request_session(request)
    console = sessions(request)
    if request.method == "POST":
        console.check_origin(request, ctx.settings.resolved_public_url)
    visitor = await console.visitor(request, db, ctx.clock.now())
    request.scope["buildbay.visitor"] = visitor
    if request.method == "POST":
        if visitor.user is None:
            await limit_by_ip(ctx, request)
        else:
            await count_request(ctx, request, f"user:{visitor.user.id}", visitor.user.plan)
        sent = request.headers.get(CSRF_HEADER)
        if sent is None:
            sent = str((await posted_form(request)).get(CSRF_FIELD) or "")
        console.check_csrf(visitor, sent)
    if signed_in and visitor.user is None:
        raise NotAuthenticated("Sign in to continue")
    return visitor, db


async def visit_application(
    request: Request, project_id: str, app_id: str, role: ProjectRole
) -> tuple[Visitor, AsyncSession, ApplicationAccess]:
    """`visit`, then the visitor's access to the application, with at least `role` (404 or
    403 as the API answers)."""
    visitor, db = await visit(request)
    access = await application_of(Reads.within(db), visitor.principal, project_id, app_id, role)
    return visitor, db, access


async def posted_form(request: Request) -> Any:
    """The posted form: URL-encoded only (no file parts) and at most MAX_FORM_BYTES."""
    if not request.headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
        raise BadRequest("Send the form as application/x-www-form-urlencoded")
    length = whole_number(request.headers.get("content-length", ""), max_digits=20)
    if length is None or length > MAX_FORM_BYTES:
        raise PayloadTooLarge(f"A form is at most {MAX_FORM_BYTES} bytes, with a Content-Length")
    return await request.form()


async def form_fields(request: Request) -> dict[str, str]:
    form = await posted_form(request)
    return {k: str(v) for k, v in form.items() if k != CSRF_FIELD and isinstance(v, str)}


def _field_errors(exc: ModelError) -> dict[str, str]:
    """Pydantic's errors by field (the API's camelCase names), as one sentence each."""
    found: dict[str, str] = {}
    for error in exc.errors():
        name = str(error["loc"][0]) if error["loc"] else "form"
        found.setdefault(name, fieldsentence(name, error))
    return found


# What a field is called in a sentence: "The password needs at least 8 characters."
_LABELS = {
    "email": "e-mail address", "emails": "e-mail addresses", "password": "password",
    "name": "name", "bundleId": "bundle id", "url": "address", "description": "description",
    "expiresInDays": "number of days", "installLinkDays": "number of days", "role": "role",
    "platform": "platform", "scope": "scope", "events": "events", "notes": "release notes",
    "projects": "projects", "projectIds": "projects", "channels": "channels",
    "fileName": "file name", "fileSize": "file size", "partNumbers": "parts",
    "currentPassword": "current password", "newPassword": "new password",
    "newEmail": "new e-mail address", "keyId": "key ID", "issuerId": "issuer ID",
    "privateKey": "private key", "assignee": "assignee",
}  # fmt: skip
# Fields whose shape is a rule of their own, said as the rule.
_SHAPES = {
    "bundleId": "A bundle id is letters, digits, dots, dashes and underscores, like "
    "com.example.app.",
}


def sentence(text: str) -> str:
    """`text` as a sentence: a capital first (unless it starts with an address, which keeps
    its case), a full stop last."""
    text = text.strip()
    if "@" not in text.split(" ", 1)[0]:
        text = text[:1].upper() + text[1:]
    return text if text.endswith((".", "!", "?")) else text + "."


def fieldsentence(field: str, error: Any) -> str:
    """One of pydantic's errors (an ErrorDetails) as a sentence for a person: never a type
    name, a pattern or "Input should be"."""
    label = _LABELS.get(field, "value")
    kind, context = error["type"], error.get("ctx") or {}
    article = "an" if label[0] in "aeiou" else "a"
    message = str(error["msg"]).removeprefix("Value error, ")
    if (
        kind in ("missing", "string_type", "none_required")
        or error.get("input") == ""
        or (kind == "string_too_short" and context.get("min_length") == 1)
    ):
        return f"Enter {article} {label}."
    if kind == "unmailable_email":  # valid, but mail cannot reach it: say which, and why
        return sentence(f"The e-mail address {error.get('input', '')} {message}")
    if field in ("email", "emails", "newEmail") or "email address" in message:
        return "Enter a valid e-mail address, like name@example.com."
    if kind == "string_too_short":
        return f"The {label} needs at least {context['min_length']} characters."
    if kind == "string_too_long":
        return f"The {label} can be at most {context['max_length']} characters."
    if kind in ("int_parsing", "int_type", "int_from_float", "float_parsing"):
        return f"The {label} must be a whole number."
    if kind in ("greater_than_equal", "greater_than"):
        bound = context.get("ge", context.get("gt"))
        return (
            f"The {label} must be at least {bound}."
            if "ge" in context
            else (f"The {label} must be more than {bound}.")
        )
    if kind in ("less_than_equal", "less_than"):
        bound = context.get("le", context.get("lt"))
        return (
            f"The {label} can be at most {bound}."
            if "le" in context
            else (f"The {label} must be less than {bound}.")
        )
    if kind in ("enum", "literal_error"):
        return f"Choose {article} {label} from the list."
    if kind == "string_pattern_mismatch":
        return _SHAPES.get(field, f"The {label} holds characters it cannot have.")
    if kind.startswith("url_"):
        return "Enter a full address, like https://example.com/hooks/buildbay."
    if kind == "too_short":
        least = context.get("min_length", 1)
        return f"Choose at least {'one' if least == 1 else least} of the {label}."
    if kind == "too_long":
        return f"Choose at most {context.get('max_length')} {label}."
    if message[:1].islower():  # a validator's reason, about the field: "cannot be blank"
        return sentence(f"The {label} {message}")
    return sentence(message)


# How a field error that says what is wrong with the field starts ("must be an https:// URL"):
# it reads after the field's name. Others are sentences of their own ("no Buildbay account has
# this e-mail; ...").
_PREDICATES = ("is ", "are ", "must ", "can ", "cannot ", "contains ", "has ", "holds ",
               "mixes ", "needs ", "should ", "was ", "does ", "points ", "resolves ")  # fmt: skip


def field_sentence(field: str, message: str) -> str:
    """A service's error about `field` as a sentence for a person: the field in words, never
    its API name ("email: ..." is how the API's detail says it, not a page)."""
    if message.startswith(_PREDICATES):
        return sentence(f"The {_LABELS.get(field, 'value')} {message}")
    return sentence(message)


def said(exc: BuildbayError) -> str:
    """What a refusal says to a person: its field errors as sentences, else its detail (which
    names no field)."""
    if exc.errors:
        return " ".join(field_sentence(e.field, e.message) for e in exc.errors)
    return exc.detail


def domain_field_errors(exc: BuildbayError, fallback: str) -> dict[str, str]:
    """A service's refusal, by field, as sentences (its field errors say what is wrong with
    the field: "must be an https:// URL"); its detail beside `fallback` if it names none."""
    found: dict[str, str] = {}
    for error in exc.errors or ():
        found.setdefault(error.field, field_sentence(error.field, error.message))
    return found or {fallback: sentence(exc.detail)}


async def read_json(request: Request) -> Any:
    try:
        return await request.json()
    except ValueError:
        raise BadRequest("The request body is not valid JSON", code="malformed_json") from None


def json_body(model: type[M], data: Any) -> M:
    """The script's JSON as `model`, or a 422 problem naming each field, as the API's."""
    try:
        return model.model_validate(data)
    except ModelError as exc:
        errors = [FieldError(field, message) for field, message in _field_errors(exc).items()]
        detail = " ".join(e.message for e in errors)  # sentences, as the page shows them
        raise ValidationFailed(detail, errors=errors) from None


def parse_form(model: type[BaseModel], data: dict[str, Any]) -> BaseModel:
    try:
        return model.model_validate(data)
    except ModelError as exc:
        raise FormError(_field_errors(exc)) from None


class FormError(ValidationFailed):
    """A form's fields that do not validate; pages that have the form show them beside it."""

    def __init__(self, errors: dict[str, str]) -> None:
        # Its detail is for a page too (the error page, a banner): sentences, no field names.
        super().__init__(" ".join(sentence(v) for v in errors.values()))
        self.by_field = errors


def can(role: ProjectRole) -> Callable[[str], bool]:
    """For templates: whether the visitor's role includes the one named."""
    return lambda needed: role.includes(ProjectRole(needed))


def page(template: str, visitor: Visitor, status_code: int = 200, **context: Any) -> Response:
    """A console page. Its `notice` is the page's own, else the one the last answer left
    (`Visitor.tell`), shown once: never text from the address."""
    left = visitor.take_notice()
    if context.get("notice") is None:
        context["notice"] = left
    return render(template, status_code, headers=CONSOLE, visitor=visitor, **context)


def see_other(url: str) -> RedirectResponse:
    return RedirectResponse(url, status_code=303)


def safe_next(target: str | None) -> str:
    """Only a path of this site: never an open redirect."""
    if target and target.startswith("/") and not target.startswith("//") and "\\" not in target:
        return target
    return "/projects"


def search_and_cursor(
    request: Request, max_search: int, *, pages_of: str, start: str
) -> tuple[str, str | None]:
    """A list page's `?q=` (trimmed to `max_search` characters, without NUL, which PostgreSQL
    refuses in text) and the `after_id` of its `?cursor=` (the next page's, as the API's): a
    cursor the console did not give out is a 422 that says to start again from `start`."""
    query = request.query_params
    search = query.get("q", "").replace("\x00", "").strip()[:max_search]
    try:
        after_id = page_of(None, query.get("cursor")).after_id
    except ValidationFailed:
        raise ValidationFailed(
            f"This address asks for a page of {pages_of} that the console did not give out. "
            f"Start again from {start}."
        ) from None
    return search, after_id


def now(request: Request) -> Any:
    return get_context(request).clock.now()


def console_sessions(master_key: bytes, refresh_days: int, public_url: str) -> ConsoleSessions:
    """Secure cookies exactly when the console is served over https (console/session.py)."""
    secure = public_url.startswith("https://")
    return ConsoleSessions(master_key, timedelta(days=refresh_days), secure=secure)

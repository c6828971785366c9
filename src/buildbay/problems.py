"""RFC 9457 problem+json: the one place that turns errors (the domain's, FastAPI's, the
database's) into HTTP responses, and the OpenAPI entries that document them."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from buildbay.errors import RETRY_AFTER_UNAVAILABLE, BuildbayError, FieldError
from buildbay.security_headers import SecurityHeaders

log = logging.getLogger("buildbay")

PROBLEM_CONTENT_TYPE = "application/problem+json"
CLIENT_CLOSED_REQUEST = 499  # nginx's status for a client gone before the answer; not sent
# SQLSTATE classes of a database that is down, starting, stopping or out of resources: 08
# connection exception, 53 insufficient resources, 57 operator intervention (`the database
# system is shutting down`, `... is starting up`), 58 system error.
UNAVAILABLE_SQLSTATE_CLASSES = frozenset({"08", "53", "57", "58"})


class FieldProblem(BaseModel):
    field: str
    message: str


class NotInvitedProblem(BaseModel):
    email: str
    reason: str = Field(examples=["recipient_limit"])
    detail: str


class Problem(BaseModel):
    """RFC 9457 problem details, with Buildbay's stable `code` and the `requestId` of the log."""

    model_config = ConfigDict(populate_by_name=True)

    type: str = Field(examples=["/problems/validation-error"])
    title: str = Field(examples=["Validation error"])
    status: int = Field(examples=[422])
    detail: str = Field(examples=["fileSize: must be greater than 0"])
    code: str = Field(examples=["validation_error"])
    request_id: str | None = Field(default=None, alias="requestId")
    errors: list[FieldProblem] | None = None
    missing_parts: list[int] | None = Field(
        default=None,
        alias="missingParts",
        description="`upload_incomplete` of a multipart upload: the part numbers not yet received",
    )
    # `invitation_limit` (invitations/caps.py): what was done, and what was not.
    invited: list[str] | None = Field(
        default=None, description="`invitation_limit`: the addresses invited (and mailed)"
    )
    not_invited: list[NotInvitedProblem] | None = Field(
        default=None,
        alias="notInvited",
        description="`invitation_limit`, `invitations_blocked`: the addresses not invited, and why",
    )
    testers: list[str] | None = Field(
        default=None, description="`invitation_limit` of groups/*/testers: members now in it"
    )
    distribution: dict[str, Any] | None = Field(
        default=None,
        description="`invitation_limit` of a distribution: its answer (`buildId`, `groups`, "
        "`testersReached`, `notified`), done but for the addresses not invited",
    )
    build: dict[str, Any] | None = Field(
        default=None, description="`invitation_limit` of a verify: the build (`id`, `status`)"
    )
    # An Apple registration of the missing devices that Apple stopped (devices/apple/).
    registered: list[str] | None = Field(
        default=None,
        description="`apple_*` of `devices/register-with-apple`: the ids of the devices "
        "registered before Apple stopped the batch (they stay registered)",
    )
    remaining: int | None = Field(
        default=None,
        description="`apple_*` of `devices/register-with-apple`: the devices still to register",
    )


def request_id_of(request: Request) -> str | None:
    return getattr(request.state, "request_id", None)


def problem_response(
    request: Request,
    status: int,
    code: str,
    detail: str,
    *,
    title: str | None = None,
    headers: Mapping[str, str] | None = None,
    errors: Sequence[FieldError] | None = None,
    extensions: Mapping[str, Any] | None = None,
) -> JSONResponse:
    body = problem_body(status, code, detail, request_id_of(request), title=title, errors=errors)
    body.update(extensions or {})
    return JSONResponse(body, status_code=status, headers=headers, media_type=PROBLEM_CONTENT_TYPE)


# RFC 9110's names where Python's HTTPStatus still has the older RFC 7231 ones.
_TITLES = {413: "Content Too Large", 422: "Unprocessable Content"}


def problem_body(
    status: int,
    code: str,
    detail: str,
    request_id: str | None,
    *,
    title: str | None = None,
    errors: Sequence[FieldError] | None = None,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "type": f"/problems/{code.replace('_', '-')}",
        "title": title or _TITLES.get(status) or HTTPStatus(status).phrase,
        "status": status,
        "detail": detail,
        "code": code,
        "requestId": request_id,
    }
    if errors is not None:
        body["errors"] = [{"field": e.field, "message": e.message} for e in errors]
    return body


# Why a body is not valid JSON, when the decoder's message would not say (deps.JsonBodyRequest).
JSON_TOO_DEEP = "it nests too deeply"
JSON_NOT_UTF8 = "it is not UTF-8"
JSON_NUMBER_TOO_LONG = "it holds a number too long to read"
JSON_BODY_REASONS = frozenset({JSON_TOO_DEEP, JSON_NOT_UTF8, JSON_NUMBER_TOO_LONG})


def _field_name(loc: Sequence[int | str]) -> str:
    # ("body", "fileSize") -> "fileSize"; ("query", "limit") -> "limit"
    parts = [str(p) for p in loc[1:]] if len(loc) > 1 else [str(p) for p in loc]
    return ".".join(parts) or "body"


def _validation_response(request: Request, exc: RequestValidationError) -> JSONResponse:
    raw = exc.errors()
    invalid = next((e for e in raw if e.get("type") == "json_invalid"), None)
    if invalid is not None:
        # JsonBodyRequest's reasons (a sentence's end); the decoder's own messages name a
        # position in the body and stay out of the detail.
        reason = (invalid.get("ctx") or {}).get("error", "")
        detail = "The request body is not valid JSON"
        if reason in JSON_BODY_REASONS:
            detail += f": {reason}"
        return problem_response(request, 400, "malformed_json", detail)
    errors = []
    for e in raw:
        message = str(e.get("msg", "is invalid"))
        if e.get("type") == "extra_forbidden":
            message = "is not a field of this request"
        elif e.get("type") == "missing":
            message = "is required"
        elif e.get("type") == "value_error" and "error" in (e.get("ctx") or {}):
            # Our own validators' words, without pydantic's "Value error, " before them.
            message = str(e["ctx"]["error"])
        errors.append(FieldError(field=_field_name(e.get("loc", ())), message=message))
    detail = "; ".join(f"{e.field}: {e.message}" for e in errors) or "The request is invalid"
    return problem_response(
        request, 422, "validation_error", detail, title="Validation error", errors=errors
    )


# What a browser is shown instead of problem+json for an error of no route (404, 405) on a page
# address, if anything: the console's (console/pages.py, browser_error).
BrowserError = Callable[[Request, int], Response | None]


def install_error_handlers(
    app: FastAPI, security_headers: SecurityHeaders, browser_error: BrowserError | None = None
) -> None:
    async def on_buildbay_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, BuildbayError)
        if exc.status >= 500:
            log.error("%s: %s (request %s)", exc.code, exc.detail, request_id_of(request))
        return problem_response(
            request,
            exc.status,
            exc.code,
            exc.detail,
            title=exc.title,
            headers=exc.headers,
            errors=exc.errors,
            extensions=exc.extensions,
        )

    async def on_validation_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        return _validation_response(request, exc)

    async def on_http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        if browser_error is not None and (page := browser_error(request, exc.status_code)):
            return page
        # 413 here is the JSON body limit hit while reading a chunked body (see ApiMiddleware).
        # 408 is a request body that did not arrive in time (see ApiMiddleware).
        codes = {
            404: "not_found",
            405: "method_not_allowed",
            408: "body_timeout",
            413: "body_too_large",
        }
        code = codes.get(exc.status_code, HTTPStatus(exc.status_code).name.lower())
        detail = str(exc.detail) if exc.detail else HTTPStatus(exc.status_code).phrase
        if exc.status_code == 404 and exc.detail == "Not Found":
            detail = f"No endpoint at {request.url.path}"
        headers = dict(exc.headers or {})
        if exc.status_code == 405:
            # Each method of a path is its own route, and the one that answers 405 names only
            # its own: Allow must list every method the path has (RFC 9110).
            allowed = allowed_methods(request.app, request.url.path, request.scope.get("route"))
            headers["Allow"] = ", ".join(allowed)
        return problem_response(request, exc.status_code, code, detail, headers=headers)

    async def on_database_error(request: Request, exc: Exception) -> JSONResponse:
        if isinstance(exc, DBAPIError) and not database_unavailable(exc):
            raise exc  # a fault, not an outage: on to on_unexpected_error (500)
        log.error("database unavailable (request %s): %s", request_id_of(request), exc)
        return problem_response(
            request,
            503,
            "database_unavailable",
            "The database cannot be reached; try again shortly",
            headers={"Retry-After": str(RETRY_AFTER_UNAVAILABLE)},
        )

    async def on_client_disconnect(request: Request, exc: Exception) -> JSONResponse:
        # The client went away while its body was still arriving (a cancelled upload, a lost
        # network): not a fault of the server. What was received is already thrown away (the
        # storage discards a partial upload); the answer only names the case for the access log,
        # as 499 (nginx's "client closed request"), since no one is left to read it.
        log.info(
            "client disconnected before sending its whole body: %s %s (request %s)",
            request.method,
            request.url.path,
            request_id_of(request),
        )
        return problem_response(
            request,
            CLIENT_CLOSED_REQUEST,
            "client_closed_request",
            "The client closed the connection before sending the whole request body",
            title="Client Closed Request",
        )

    async def on_unexpected_error(request: Request, exc: Exception) -> JSONResponse:
        request_id = request_id_of(request)
        log.exception("unexpected error (request %s)", request_id, exc_info=exc)
        # Starlette sends this response from its outermost middleware, past ApiMiddleware's
        # X-Request-ID and security headers, so they are set here.
        headers = dict(security_headers.for_path(request.url.path))
        if request_id:
            headers["X-Request-ID"] = request_id
        return problem_response(
            request,
            500,
            "internal_error",
            "An unexpected error occurred; quote the requestId when reporting it",
            headers=headers,
        )

    app.add_exception_handler(BuildbayError, on_buildbay_error)
    app.add_exception_handler(RequestValidationError, on_validation_error)
    app.add_exception_handler(StarletteHTTPException, on_http_error)
    app.add_exception_handler(DBAPIError, on_database_error)
    app.add_exception_handler(PoolTimeoutError, on_database_error)
    app.add_exception_handler(ConnectionError, on_database_error)
    app.add_exception_handler(ClientDisconnect, on_client_disconnect)
    app.add_exception_handler(Exception, on_unexpected_error)


def database_unavailable(exc: DBAPIError) -> bool:
    """Whether a database error means the database cannot be used right now (503, worth a
    retry), rather than a fault in what was asked of it (a bug: 500).

    asyncpg's errors for a server that is stopping or starting reach SQLAlchemy as its generic
    DBAPIError, not as an OperationalError: their SQLSTATE says what they are.
    """
    if isinstance(exc, OperationalError | InterfaceError) or exc.connection_invalidated:
        return True
    sqlstate = getattr(exc.orig, "sqlstate", None)
    return isinstance(sqlstate, str) and sqlstate[:2] in UNAVAILABLE_SQLSTATE_CLASSES


def allowed_methods(app: FastAPI, path: str, answering: object = None) -> list[str]:
    """Every method `app` serves at `path`'s route template: the template of the route that
    answered (`answering`), or else of every template that matches the path."""
    routes = [route for route in app.routes if isinstance(route, APIRoute)]
    template = answering.path if isinstance(answering, APIRoute) else None
    methods: set[str] = set()
    for route in routes:
        matches = route.path == template if template else bool(route.path_regex.match(path))
        if matches:
            methods |= route.methods or set()
    return sorted(methods)


def problem_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses=` entries documenting the problem+json body of each status."""
    descriptions = {
        400: "Malformed JSON or wrong Content-Type",
        401: "Missing, malformed, expired or revoked token",
        403: "No rights (or too low a role) on the project or application",
        404: "Unknown resource",
        409: "Conflict with the resource's current state",
        410: "The link has expired or was revoked",
        413: "Body or declared file size too large",
        422: "Validation error",
        429: "Rate limit exceeded (see Retry-After)",
        503: "Database or storage unreachable (see Retry-After)",
    }
    return {
        s: {
            "description": descriptions.get(s, HTTPStatus(s).phrase),
            "content": {PROBLEM_CONTENT_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}},
        }
        for s in statuses
    }

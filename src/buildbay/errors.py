"""The error tree and the one handler that turns every error into RFC 9457 problem+json."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute, iter_route_contexts
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import compile_path

log = logging.getLogger("buildbay")

PROBLEM_CONTENT_TYPE = "application/problem+json"
RETRY_AFTER_UNAVAILABLE = 5
# SQLSTATE classes of a database that is down, starting, stopping or out of resources: 08
# connection exception, 53 insufficient resources, 57 operator intervention (`the database
# system is shutting down`, `... is starting up`), 58 system error.
UNAVAILABLE_SQLSTATE_CLASSES = frozenset({"08", "53", "57", "58"})


class FieldError(BaseModel):
    field: str
    message: str


class Problem(BaseModel):
    """RFC 9457 problem details, with Buildbay's stable `code` and the `requestId` of the log."""

    model_config = ConfigDict(populate_by_name=True)

    type: str = Field(examples=["/problems/validation-error"])
    title: str = Field(examples=["Validation error"])
    status: int = Field(examples=[422])
    detail: str = Field(examples=["fileSize: must be greater than 0"])
    code: str = Field(examples=["validation_error"])
    request_id: str | None = Field(default=None, alias="requestId")
    errors: list[FieldError] | None = None


class BuildbayError(Exception):
    """Base of every error a service raises. Subclasses fix the status; `code` says which case."""

    status: int = 500
    code: str = "internal_error"
    title: str | None = None

    def __init__(
        self,
        detail: str,
        *,
        code: str | None = None,
        headers: Mapping[str, str] | None = None,
        errors: Sequence[FieldError] | None = None,
    ) -> None:
        super().__init__(detail)
        self.detail = detail
        if code is not None:
            self.code = code
        self.headers = dict(headers or {})
        self.errors = list(errors) if errors is not None else None


class BadRequest(BuildbayError):
    status, code = 400, "bad_request"


class NotAuthenticated(BuildbayError):
    status, code = 401, "not_authenticated"

    def __init__(self, detail: str = "A valid bearer token is required", **kw: Any) -> None:
        kw.setdefault("headers", {"WWW-Authenticate": "Bearer"})
        super().__init__(detail, **kw)


class Forbidden(BuildbayError):
    status, code = 403, "forbidden"


class NotFound(BuildbayError):
    status, code = 404, "not_found"


class Conflict(BuildbayError):
    status, code = 409, "conflict"


class Gone(BuildbayError):
    status, code = 410, "gone"


class PayloadTooLarge(BuildbayError):
    status, code = 413, "payload_too_large"


class ValidationFailed(BuildbayError):
    status, code = 422, "validation_error"

    @classmethod
    def for_field(cls, field: str, message: str, *, code: str | None = None) -> ValidationFailed:
        return cls(
            f"{field}: {message}", code=code, errors=[FieldError(field=field, message=message)]
        )


class RateLimited(BuildbayError):
    status, code = 429, "rate_limited"


class ServiceUnavailable(BuildbayError):
    status, code = 503, "service_unavailable"

    def __init__(self, detail: str, **kw: Any) -> None:
        kw.setdefault("headers", {"Retry-After": str(RETRY_AFTER_UNAVAILABLE)})
        super().__init__(detail, **kw)


class InsufficientStorage(BuildbayError):
    status, code = 507, "insufficient_storage"


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
) -> JSONResponse:
    body = problem_body(status, code, detail, request_id_of(request), title=title, errors=errors)
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
        body["errors"] = [e.model_dump() for e in errors]
    return body


def _field_name(loc: Sequence[int | str]) -> str:
    # ("body", "fileSize") -> "fileSize"; ("query", "limit") -> "limit"
    parts = [str(p) for p in loc[1:]] if len(loc) > 1 else [str(p) for p in loc]
    return ".".join(parts) or "body"


def _validation_response(request: Request, exc: RequestValidationError) -> JSONResponse:
    raw = exc.errors()
    if any(e.get("type") == "json_invalid" for e in raw):
        return problem_response(
            request, 400, "malformed_json", "The request body is not valid JSON"
        )
    errors = []
    for e in raw:
        message = str(e.get("msg", "is invalid"))
        if e.get("type") == "extra_forbidden":
            message = "is not a field of this request"
        elif e.get("type") == "missing":
            message = "is required"
        errors.append(FieldError(field=_field_name(e.get("loc", ())), message=message))
    detail = "; ".join(f"{e.field}: {e.message}" for e in errors) or "The request is invalid"
    return problem_response(
        request, 422, "validation_error", detail, title="Validation error", errors=errors
    )


def install_error_handlers(app: FastAPI) -> None:
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
        )

    async def on_validation_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        return _validation_response(request, exc)

    async def on_http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
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

    async def on_unexpected_error(request: Request, exc: Exception) -> JSONResponse:
        request_id = request_id_of(request)
        log.exception("unexpected error (request %s)", request_id, exc_info=exc)
        # Starlette sends this response from its outermost middleware, past ApiMiddleware's
        # X-Request-ID, so the header is set here.
        return problem_response(
            request,
            500,
            "internal_error",
            "An unexpected error occurred; quote the requestId when reporting it",
            headers={"X-Request-ID": request_id} if request_id else None,
        )

    app.add_exception_handler(BuildbayError, on_buildbay_error)
    app.add_exception_handler(RequestValidationError, on_validation_error)
    app.add_exception_handler(StarletteHTTPException, on_http_error)
    app.add_exception_handler(DBAPIError, on_database_error)
    app.add_exception_handler(PoolTimeoutError, on_database_error)
    app.add_exception_handler(ConnectionError, on_database_error)
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
    contexts = [
        c for c in iter_route_contexts(app.routes) if isinstance(c.original_route, APIRoute)
    ]
    template = next((c.path_format for c in contexts if c.original_route is answering), None)
    methods: set[str] = set()
    for context in contexts:
        if template is not None:
            matches = context.path_format == template
        else:
            template_here = context.path_format or ""
            matches = bool(template_here) and bool(compile_path(template_here)[0].match(path))
        if matches:
            methods |= context.original_route.methods or set()  # type: ignore[attr-defined]
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

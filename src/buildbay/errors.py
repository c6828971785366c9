"""The domain's errors: what a service raises when a request cannot be done, each with the HTTP
status and the stable `code` that `buildbay.problems` turns into RFC 9457 problem+json. Free of
FastAPI and SQLAlchemy: services, storage and the console raise these, and only
`buildbay.problems` knows about HTTP responses."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

RETRY_AFTER_UNAVAILABLE = 5


@dataclass(frozen=True, slots=True)
class FieldError:
    """One field of a request that is wrong, and why (the `errors` of a 422)."""

    field: str
    message: str


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
        keeps_writes: bool = False,
        extensions: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(detail)
        # The request fails, but what its unit of work wrote before stands (e.g. revoking a
        # session whose refresh token was replayed).
        self.keeps_writes = keeps_writes
        self.detail = detail
        if code is not None:
            self.code = code
        self.headers = dict(headers or {})
        self.errors = list(errors) if errors is not None else None
        # Members of the problem+json beside the standard ones (e.g. `missingParts`).
        self.extensions = dict(extensions or {})


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

"""What the client raises: one class per kind of failure, each carrying the problem+json answer
(status, code, detail, requestId) when the server gave one."""

from __future__ import annotations

from typing import Any


class BuildbayClientError(Exception):
    """Base of everything the client raises."""


class NetworkError(BuildbayClientError):
    """The server could not be reached (or stopped answering), after the retries."""


class SignInFailed(BuildbayClientError):
    """`login --sso`: the sign-in was refused, expired, or not finished in time."""


class UnexpectedAnswer(BuildbayClientError):
    """The server's answer is not what this API gives (another service at that address?)."""


class ApiError(BuildbayClientError):
    """The server answered with an error (RFC 9457 problem+json)."""

    def __init__(self, status: int, problem: dict[str, Any]) -> None:
        self.status = status
        self.problem = problem
        self.code: str = str(problem.get("code") or "error")
        self.detail: str = str(problem.get("detail") or problem.get("title") or f"HTTP {status}")
        self.request_id: str | None = problem.get("requestId")
        super().__init__(f"{self.detail} ({status} {self.code})")


class AuthenticationError(ApiError):
    """401: no token, or one that is invalid, expired or revoked."""


class PermissionDenied(ApiError):
    """403: not a member, or too low a role."""


class NotFoundError(ApiError):
    """404 (or 410: an install link that is gone)."""


class ConflictError(ApiError):
    """409: the resource's state does not allow it (build not ready, e-mail taken, ...)."""


class LimitError(ApiError):
    """413 or 429: a file, body or quota too large, or too many requests."""


class ValidationError(ApiError):
    """400 or 422: the request itself is wrong (see problem["errors"])."""


class ServerError(ApiError):
    """5xx: the server could not do it (503 after the retries, or a bug: quote request_id)."""


_BY_STATUS: dict[int, type[ApiError]] = {
    400: ValidationError,
    401: AuthenticationError,
    403: PermissionDenied,
    404: NotFoundError,
    409: ConflictError,
    410: NotFoundError,
    413: LimitError,
    422: ValidationError,
    429: LimitError,
}


def error_for(status: int, problem: dict[str, Any]) -> ApiError:
    cls = _BY_STATUS.get(status, ServerError if status >= 500 else ApiError)
    return cls(status, problem)

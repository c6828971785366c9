"""The Buildbay Python SDK: `from buildbay_client import Buildbay`.

with Buildbay("https://builds.example.com", token=os.environ["BUILDBAY_TOKEN"]) as bb:
    build = bb.upload_build(project_id, app_id, "app-release.apk", notes="Fixes login")
    print(build.install_url or build.download_url)

The clients (and httpx under them) are imported on first use, so that `buildbay --help`, which
imports this package, starts without them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from buildbay_client.errors import (
    ApiError,
    AuthenticationError,
    BuildbayClientError,
    ConflictError,
    LimitError,
    NetworkError,
    NotFoundError,
    PermissionDenied,
    ServerError,
    UnexpectedAnswer,
    ValidationError,
)

if TYPE_CHECKING:
    from buildbay_client.api import AsyncBuildbay, Buildbay, RetryPolicy

__version__ = "0.1.0"

_CLIENTS = {"AsyncBuildbay", "Buildbay", "RetryPolicy"}


def __getattr__(name: str) -> Any:
    if name in _CLIENTS:
        from buildbay_client import api

        return getattr(api, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ApiError",
    "AsyncBuildbay",
    "AuthenticationError",
    "Buildbay",
    "BuildbayClientError",
    "ConflictError",
    "LimitError",
    "NetworkError",
    "NotFoundError",
    "PermissionDenied",
    "RetryPolicy",
    "ServerError",
    "UnexpectedAnswer",
    "ValidationError",
]

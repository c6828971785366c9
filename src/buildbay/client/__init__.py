"""The Buildbay Python SDK: `from buildbay.client import Buildbay`.

with Buildbay("https://builds.example.com", token=os.environ["BUILDBAY_TOKEN"]) as bb:
    build = bb.upload_build(project_id, app_id, "app-release.apk", notes="Fixes login")
    print(build.install_url or build.download_url)
"""

from buildbay.client.api import AsyncBuildbay, Buildbay, RetryPolicy
from buildbay.client.errors import (
    ApiError,
    AuthenticationError,
    BuildbayClientError,
    ConflictError,
    LimitError,
    NetworkError,
    NotFoundError,
    PermissionDenied,
    ServerError,
    ValidationError,
)

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
    "ValidationError",
]

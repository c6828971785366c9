"""Trusted publishers and the ID-token exchange as the API shows them."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from pydantic import Field

from buildbay.publishers.records import PublisherRecord
from buildbay.publishers.subjects import MAX_PATTERN
from buildbay.schemas import ApiModel, RequestModel, Timestamp
from buildbay.text import BIDI_CLASS, CONTROL_CLASS

GITHUB_ISSUER = "https://token.actions.githubusercontent.com"
GITLAB_ISSUER = "https://gitlab.com"
KNOWN_ISSUERS = {"GitHub Actions": GITHUB_ISSUER, "GitLab.com": GITLAB_ISSUER}
_NO_SPACE = r"^\S+$"
# No space, and no control or bidirectional character (shown in lists and the audit log).
_AUDIENCE = f"^[^\\s{CONTROL_CLASS}{BIDI_CLASS}]+$"

Issuer = Annotated[
    str,
    Field(
        min_length=1, max_length=255, pattern=r"^https?://\S+$",
        examples=[GITHUB_ISSUER],
        description="The ID tokens' `iss`, exactly: GitHub Actions' "
        f"`{GITHUB_ISSUER}`, GitLab.com's `{GITLAB_ISSUER}`, a self-managed GitLab's address. "
        "https:// and a public host (in development also http:// on a loopback address)",
    ),
]  # fmt: skip
SubjectPattern = Annotated[
    str,
    Field(
        min_length=1, max_length=MAX_PATTERN, pattern=_NO_SPACE,
        examples=["repo:acme/shop:ref:refs/heads/main"],
        description="The `sub` claims trusted: `*` is one or more characters but `:` and `/`; "
        "`**` (only at the end) the rest, whatever it holds; the first two `:`-separated "
        "parts are written out before any wildcard. E.g. `repo:acme/shop:ref:refs/heads/main`, "
        "`repo:acme/shop:environment:*`, `project_path:acme/shop:ref_type:branch:ref:main`",
    ),
]  # fmt: skip
Audience = Annotated[
    str,
    Field(
        min_length=1, max_length=255, pattern=_AUDIENCE, examples=["buildbay.example.com"],
        description="The `aud` the tokens must have (exactly: one audience): what the CI asks "
        "its token for (`buildbay upload` asks for the server's host by default)",
    ),
]  # fmt: skip


class TrustedPublisherCreate(RequestModel):
    EXAMPLE: ClassVar[dict[str, Any] | None] = {
        "issuer": GITHUB_ISSUER,
        "subjectPattern": "repo:acme/shop:ref:refs/heads/main",
        "audience": "buildbay.example.com",
    }

    issuer: Issuer
    subject_pattern: SubjectPattern
    audience: Audience


class TrustedPublisher(ApiModel):
    id: str
    application_id: str
    issuer: str
    subject_pattern: str
    audience: str
    created_by: str | None = Field(description="The user who added it (null once deleted)")
    created_at: Timestamp


class TrustedPublisherList(ApiModel):
    trusted_publishers: list[TrustedPublisher]
    next_cursor: str | None


def publisher_schema(record: PublisherRecord) -> TrustedPublisher:
    return TrustedPublisher(
        id=record.id,
        application_id=record.application_id,
        issuer=record.issuer,
        subject_pattern=record.subject_pattern,
        audience=record.audience,
        created_by=record.created_by,
        created_at=record.created_at,
    )


class OidcExchangeRequest(RequestModel):
    EXAMPLE: ClassVar[dict[str, Any] | None] = {
        "token": "eyJhbGciOiJSUzI1NiIsImtpZCI6...",
        "applicationId": "app_01M8172YN304XC3KQJSHW78G48",
    }

    token: str = Field(
        min_length=1, max_length=16384, description="The CI's OpenID Connect ID token (a JWT)"
    )
    application_id: str = Field(
        pattern=r"^app_[0-9A-Za-z]{26}$",
        description="The application to upload to, by its id (`app_...`): the token is "
        "answered only if a trusted publisher of that application takes the ID token (a "
        "publisher grants its own application only, so the uploader names it)",
    )


class OidcExchangeResponse(ApiModel):
    token: str = Field(
        description="An upload-only API token (`bb_...`, the `upload` scope) for the "
        "application, valid 15 minutes; send it as `Bearer <token>`"
    )
    expires_at: Timestamp
    application_id: str
    project_id: str

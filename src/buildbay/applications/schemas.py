from __future__ import annotations

from typing import Annotated, Any, ClassVar

from pydantic import Field, field_validator

from buildbay.applications.models import Platform
from buildbay.schemas import ApiModel, JsonInteger, Name, NotNull, RequestModel, Timestamp
from buildbay.text import BUNDLE_ID_MAX, BUNDLE_ID_PATTERN

ApplicationName = Name
BundleId = Annotated[
    str,
    Field(
        min_length=1,
        max_length=BUNDLE_ID_MAX,
        pattern=BUNDLE_ID_PATTERN,
        examples=["com.example.app"],
    ),
]


class RetentionRule(RequestModel):
    """Which ready builds the sweeper keeps; the newest ready build is always kept."""

    EXAMPLE: ClassVar[dict[str, Any] | None] = {"keepLast": 50, "keepDays": 90}

    keep_last: Annotated[
        Annotated[int, Field(ge=1, le=100_000, strict=True), JsonInteger] | None,
        Field(description="Keep the newest N"),
    ] = None
    keep_days: Annotated[
        Annotated[int, Field(ge=1, le=36_500, strict=True), JsonInteger] | None,
        Field(description="Keep builds verified in the last D days"),
    ] = None


class Retention(ApiModel):
    keep_last: int | None
    keep_days: int | None


class ApplicationCreate(RequestModel):
    EXAMPLE: ClassVar[dict[str, Any] | None] = {
        "name": "Acme Android",
        "platform": "android",
        "bundleId": "com.acme.mobile",
    }

    name: ApplicationName
    platform: Platform = Platform.OTHER
    bundle_id: BundleId | None = None
    retention: RetentionRule | None = None


class ApplicationUpdate(RequestModel):
    """Fields present are changed; fields left out keep their value."""

    EXAMPLE: ClassVar[dict[str, Any] | None] = {"name": "Acme Android (beta)"}

    name: ApplicationName | None = NotNull
    platform: Platform | None = NotNull
    bundle_id: BundleId | None = None
    retention: RetentionRule | None = Field(
        default=None, description="Replaces the rule; null keeps every build"
    )

    @field_validator("name", "platform")
    @classmethod
    def _not_null(cls, value: object) -> object:
        # Only reached when the client sent the field: leaving it out keeps it, null is refused.
        if value is None:
            raise ValueError("cannot be null")
        return value


class Application(ApiModel):
    id: str
    project_id: str
    name: str
    platform: Platform
    bundle_id: str | None
    retention: Retention = Field(description="Both null: every build is kept")
    builds_count: int = Field(description="Ready builds of the application")
    update_key: str | None = Field(
        default=None,
        description="The key apps send to `GET /api/updates/check` (`bbu_...`; public, it "
        "grants only the update check); shown to developers and above, null for testers",
    )
    created_at: Timestamp
    updated_at: Timestamp


class ApplicationList(ApiModel):
    applications: list[Application]
    next_cursor: str | None

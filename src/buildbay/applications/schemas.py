from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, field_validator

from buildbay.applications.enums import Platform
from buildbay.applications.records import ApplicationView
from buildbay.projects.enums import ProjectRole
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


GroupIds = Annotated[
    list[Annotated[str, Field(min_length=1, max_length=32, pattern=r"^[A-Za-z0-9_]+$")]],
    Field(
        max_length=100,
        description="Tester group ids (`everyone`: all the project's members); each build is "
        "distributed to them, with mails, once it is ready",
    ),
]
InstallLinkDays = Annotated[
    int,
    Field(
        ge=1,
        le=90,
        strict=True,
        description="How long the install link in each notified tester's mail works, in days",
    ),
    JsonInteger,
]


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
    auto_distribute_groups: GroupIds = Field(default_factory=lambda: ["everyone"])
    install_link_days: InstallLinkDays = 14


class ApplicationUpdate(RequestModel):
    """Fields present are changed; fields left out keep their value."""

    EXAMPLE: ClassVar[dict[str, Any] | None] = {"name": "Acme Android (beta)"}

    name: ApplicationName | None = NotNull
    platform: Platform | None = NotNull
    bundle_id: BundleId | None = None
    retention: RetentionRule | None = Field(
        default=None, description="Replaces the rule; null keeps every build"
    )
    auto_distribute_groups: GroupIds | None = NotNull
    install_link_days: InstallLinkDays | None = NotNull

    @field_validator("name", "platform", "auto_distribute_groups", "install_link_days")
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
    builds_count: int = Field(
        description="Ready builds of the application (a tester's: those given to them)"
    )
    update_key: str | None = Field(
        default=None,
        description="The key apps send to `GET /api/updates/check` (`bbu_...`; public, it "
        "grants only the update check); shown to developers and above, null for testers",
    )
    auto_distribute_groups: list[str] = Field(
        description="The tester groups each build is distributed to once it is ready"
    )
    install_link_days: int = Field(
        description="How long the install link in each notified tester's mail works, in days"
    )
    created_at: Timestamp
    updated_at: Timestamp


class ApplicationWarning(ApiModel):
    code: Literal["renamed"] = Field(
        description="`renamed`: CI jobs that name the application by its old name must change "
        "(its id never changes)"
    )
    detail: str = Field(description="The warning as a sentence")


class ApplicationUpdated(Application):
    warnings: list[ApplicationWarning] = Field(
        default_factory=list,
        description="What the change may break elsewhere, to tell whoever made it (empty: nothing)",
    )


class ApplicationList(ApiModel):
    applications: list[Application]
    next_cursor: str | None


def application_schema(view: ApplicationView, role: ProjectRole) -> Application:
    a = view.application
    return Application(
        id=a.id,
        project_id=a.project_id,
        name=a.name,
        platform=a.platform,
        bundle_id=a.bundle_id,
        retention=Retention(keep_last=a.retention_keep_last, keep_days=a.retention_keep_days),
        builds_count=view.builds_count,
        update_key=a.update_key if role.includes(ProjectRole.DEVELOPER) else None,
        auto_distribute_groups=a.auto_distribute_groups,
        install_link_days=a.install_link_days,
        created_at=a.created_at,
        updated_at=a.updated_at,
    )

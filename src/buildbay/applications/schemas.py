from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, field_validator

from buildbay.applications.enums import Platform, VersionPolicy
from buildbay.applications.records import ApplicationView
from buildbay.builds.records import ReadyBuild, RetentionPolicy
from buildbay.builds.schemas import version_label
from buildbay.feedback.enums import FeedbackMode
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


class RetentionProtect(RequestModel):
    """Builds a retention rule keeps whatever it says (each on unless turned off)."""

    EXAMPLE: ClassVar[dict[str, Any] | None] = {"groups": True, "channels": True}

    groups: Annotated[bool, Field(strict=True)] = Field(
        default=True, description="Keep the newest build distributed to each tester group"
    )
    channels: Annotated[bool, Field(strict=True)] = Field(
        default=True, description="Keep the newest build published to each release channel"
    )


class RetentionRule(RequestModel):
    """Which ready builds the sweeper keeps; the newest ready build is always kept, and by
    default the newest of each tester group and of each channel (`protect`)."""

    EXAMPLE: ClassVar[dict[str, Any] | None] = {"keepLast": 50, "keepDays": 90}

    keep_last: Annotated[
        Annotated[int, Field(ge=1, le=100_000, strict=True), JsonInteger] | None,
        Field(description="Keep the newest N"),
    ] = None
    keep_days: Annotated[
        Annotated[int, Field(ge=1, le=36_500, strict=True), JsonInteger] | None,
        Field(description="Keep builds verified in the last D days"),
    ] = None
    protect: RetentionProtect | None = Field(
        default=None,
        description="Builds kept whatever the rule says; left out or null: both protections on",
    )


class Protect(ApiModel):
    groups: bool = Field(description="The newest build distributed to each tester group is kept")
    channels: bool = Field(description="The newest build of each release channel is kept")


class Retention(ApiModel):
    keep_last: int | None
    keep_days: int | None
    protect: Protect


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
VERSION_POLICY = (
    "What verify does with a build whose version code (an .apk's or .aab's versionCode, an "
    ".ipa's whole-number CFBundleVersion) a ready build of other bytes already has: `warn` (the "
    "default: the build is ready, with a `version_exists` warning) or `unique` (refused with 409 "
    "`version_exists`)"
)
FEEDBACK_MODE = (
    "Who may send feedback on its builds: `testers-only` (the default: its testers to whom a "
    "build is distributed, and developers) or `anyone-with-update-key` (also an app holding the "
    "update key, naming the reporter's e-mail: for public beta rings)"
)


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
    version_policy: VersionPolicy = Field(default=VersionPolicy.WARN, description=VERSION_POLICY)
    feedback_mode: FeedbackMode = Field(
        default=FeedbackMode.TESTERS_ONLY, description=FEEDBACK_MODE
    )


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
    version_policy: Annotated[VersionPolicy | None, Field(description=VERSION_POLICY)] = NotNull
    feedback_mode: Annotated[FeedbackMode | None, Field(description=FEEDBACK_MODE)] = NotNull

    @field_validator(
        "name",
        "platform",
        "auto_distribute_groups",
        "install_link_days",
        "version_policy",
        "feedback_mode",
    )
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
    version_policy: VersionPolicy = Field(default=VersionPolicy.WARN, description=VERSION_POLICY)
    feedback_mode: FeedbackMode = Field(
        default=FeedbackMode.TESTERS_ONLY, description=FEEDBACK_MODE
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
        retention=Retention(
            keep_last=a.retention_keep_last,
            keep_days=a.retention_keep_days,
            protect=Protect(
                groups=a.retention_protect_groups, channels=a.retention_protect_channels
            ),
        ),
        builds_count=view.builds_count,
        update_key=a.update_key if role.includes(ProjectRole.DEVELOPER) else None,
        auto_distribute_groups=a.auto_distribute_groups,
        install_link_days=a.install_link_days,
        version_policy=a.version_policy,
        feedback_mode=a.feedback_mode,
        created_at=a.created_at,
        updated_at=a.updated_at,
    )


def retention_policy(rule: RetentionRule | None) -> RetentionPolicy:
    """A rule as the request gives it, as retention reckons with it."""
    if rule is None:
        return RetentionPolicy(None, None)
    protect = rule.protect or RetentionProtect()
    return RetentionPolicy(rule.keep_last, rule.keep_days, protect.groups, protect.channels)


class RetentionPreviewBuild(ApiModel):
    build_id: str
    file_name: str
    version: str | None = Field(description="As people read it: `1.4.2 (42)`")
    verified_at: Timestamp | None
    distributed: bool = Field(
        description="Distributed to a tester group or to someone by e-mail: in testers' hands"
    )


class RetentionPreview(ApiModel):
    count: int = Field(description="How many ready builds the rule deletes now")
    distributed_count: int = Field(description="How many of them are in testers' hands")
    builds: list[RetentionPreviewBuild] = Field(description="Those builds, the newest first")


def retention_preview_schema(builds: list[ReadyBuild]) -> RetentionPreview:
    return RetentionPreview(
        count=len(builds),
        distributed_count=sum(1 for b in builds if b.distributed),
        builds=[
            RetentionPreviewBuild(
                build_id=b.id,
                file_name=b.file_name,
                version=version_label(b.metadata),
                verified_at=b.verified_at,
                distributed=b.distributed,
            )
            for b in builds
        ],
    )

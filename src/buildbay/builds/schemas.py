from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, field_validator

from buildbay.builds.models import BuildStatus
from buildbay.builds.reads import BuildRecord
from buildbay.channels.schemas import ChannelNames
from buildbay.schemas import ApiModel, JsonInteger, RequestModel, Timestamp, Trimmed
from buildbay.text import (
    BIDI_CLASS,
    CONTROL_CLASS,
    INVISIBLE_CLASS,
    NOT_SHOWN_CLASS,
    WHITESPACE_CLASS,
    file_name_problem,
)

# What the rules below allow, for the OpenAPI document: a character other than `/`, `\`, the
# control, bidirectional-control and invisible characters (buildbay.text), at least one of them
# not whitespace; not `.` or `..` once trimmed.
_REFUSED = f"/\\\\{CONTROL_CLASS}{BIDI_CLASS}{INVISIBLE_CLASS}"
_ALLOWED = f"[^{_REFUSED}]"
_SHOWN = f"[^{_REFUSED}{NOT_SHOWN_CLASS}]"
FILE_NAME_SCHEMA = {
    "pattern": f"^{_ALLOWED}*{_SHOWN}{_ALLOWED}*$",
    "not": {"pattern": f"^[{WHITESPACE_CLASS}]*\\.\\.?[{WHITESPACE_CLASS}]*$"},
}
MAX_NOTES_LENGTH = 10_000
DEFAULT_HOURS = 24 * 7  # an install link's life, unless asked
MAX_HOURS = 24 * 90


def check_file_name_characters(value: str) -> str:
    """A name to show and to offer as the download's file name; never a path. (As sent: a
    control character is refused even where trimming would remove it.)"""
    if problem := file_name_problem(value):
        raise ValueError(problem)
    return value


def check_file_name(value: str) -> str:
    """Once trimmed: not a name of the directories themselves."""
    if value in {".", ".."}:
        raise ValueError("cannot be . or ..")
    return value


FileName = Annotated[
    str,
    Field(
        min_length=1,
        max_length=255,
        examples=["app-release.apk"],
        json_schema_extra=FILE_NAME_SCHEMA,
    ),
    AfterValidator(check_file_name_characters),
    Trimmed(),
    AfterValidator(check_file_name),
]


def version_label(metadata: dict[str, Any] | None) -> str | None:
    """A build's version as people read it: `1.4.2 (42)` (an APK's versionName and versionCode,
    an .ipa's CFBundleShortVersionString and CFBundleVersion), or whichever of the two it has."""
    metadata = metadata or {}
    name = metadata.get("versionName") or metadata.get("shortVersion")
    code = metadata.get("versionCode") or metadata.get("buildNumber")
    if name and code:
        return f"{name} ({code})"
    return str(name or code) if name or code else None


class UploadLinkRequest(RequestModel):
    file_name: FileName
    file_size: Annotated[
        int, Field(ge=1, strict=True, description="Exact size in bytes"), JsonInteger
    ]
    sha256: Annotated[
        str | None,
        Field(
            pattern=r"^[0-9a-fA-F]{64}$",
            description="Optional: verify then checks the stored bytes against it",
        ),
    ] = None

    @field_validator("sha256")
    @classmethod
    def _lower(cls, value: str | None) -> str | None:
        return value.lower() if value else value


class UploadLink(ApiModel):
    upload_url: str
    build_id: str
    expires_at: Timestamp
    upload_method: Literal["PUT"] = "PUT"
    upload_headers: dict[str, str] = Field(
        examples=[{"Content-Type": "application/octet-stream"}],
        description="Headers to send with the PUT",
    )


class InstallLinkRequest(RequestModel):
    expires_in_hours: Annotated[
        int,
        Field(
            ge=1,
            le=MAX_HOURS,
            strict=True,
            description=f"How long the link works (default {DEFAULT_HOURS}, at most {MAX_HOURS})",
        ),
        JsonInteger,
    ] = DEFAULT_HOURS


class VerifyRequest(RequestModel):
    build_id: Annotated[str, Field(min_length=1, max_length=64)]
    notes: Annotated[str, Field(max_length=MAX_NOTES_LENGTH), Trimmed(blank_ok=True)] | None = None
    install_link: InstallLinkRequest | None = Field(
        default=None,
        description="Also create an install link; the answer's installUrl is then its address",
    )
    channels: ChannelNames | None = Field(
        default=None,
        description='The release channels to publish the build to (default: `["default"]`); '
        "each must exist",
    )
    mandatory: Annotated[bool, Field(strict=True)] = Field(
        default=False, description="Update checks that find it say the update is mandatory"
    )


class BuildChannelsUpdate(RequestModel):
    channels: ChannelNames = Field(
        description="The channels the build is published to from now on (an empty list: none)"
    )


class BuildUpdate(RequestModel):
    mandatory: Annotated[bool, Field(strict=True)]


class Build(ApiModel):
    build_id: str
    project_id: str
    application_id: str
    file_name: str
    file_size: int
    sha256: str | None = Field(description="Hex SHA-256 of the stored bytes, set at verify")
    status: BuildStatus
    notes: str | None
    created_at: Timestamp
    verified_at: Timestamp | None
    expires_at: Timestamp = Field(description="When the upload link expires(d)")
    uploaded_by: str | None = Field(description="User id of the uploader")
    metadata: dict[str, Any] | None = Field(
        description="What the build file says about itself, where the format is known"
    )
    metadata_error: str | None = Field(
        description="Why `metadata` is null for a file whose name says .apk, .aab or .ipa but "
        "does not parse as one",
    )
    download_url: str | None = Field(
        description="The tester download endpoint (302 to the file), once the build is ready"
    )
    install_url: str | None = Field(
        description="The public install page of the build's newest live install link, if any"
    )
    icon_url: str | None = Field(
        description="The app icon the build's file carries (PNG, tester+), if it has one"
    )
    channels: list[str] = Field(
        default_factory=list, description="The release channels the build is published to"
    )
    mandatory: bool = Field(
        default=False, description="Update checks that find it say the update is mandatory"
    )


class InstallLink(ApiModel):
    link_id: str
    url: str = Field(description="The public install page: share it, or print it from CI")
    manifest_url: str | None = Field(
        description="For an .ipa: the itms-services manifest the page's install button uses"
    )
    created_by: str | None
    created_at: Timestamp
    expires_at: Timestamp
    revoked_at: Timestamp | None


class InstallLinkList(ApiModel):
    install_links: list[InstallLink]


class BuildList(ApiModel):
    builds: list[Build]
    next_cursor: str | None


class StoredUpload(ApiModel):
    """The storage address's answer to a successful PUT."""

    build_id: str
    size: int
    sha256: str


def build_schema(
    build: BuildRecord,
    public_url: str,
    install_url: str | None = None,
    channels: list[str] | None = None,
) -> Build:
    address = (
        f"{public_url}/api/app-distribution/{build.project_id}/{build.application_id}"
        f"/builds/{build.id}"
    )
    ready = build.status is BuildStatus.READY
    return Build(
        build_id=build.id,
        project_id=build.project_id,
        application_id=build.application_id,
        file_name=build.file_name,
        file_size=build.file_size,
        sha256=build.sha256,
        status=build.status,
        notes=build.notes,
        created_at=build.created_at,
        verified_at=build.verified_at,
        expires_at=build.expires_at,
        uploaded_by=build.uploaded_by,
        metadata=build.metadata_,
        metadata_error=build.metadata_error,
        download_url=f"{address}/download" if ready else None,
        install_url=install_url if ready else None,
        icon_url=f"{address}/icon" if build.has_icon else None,
        channels=channels or [],
        mandatory=build.mandatory,
    )

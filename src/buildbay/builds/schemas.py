from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, Field, WithJsonSchema, field_validator, model_validator

from buildbay.builds.enums import BuildStatus, OnDuplicate
from buildbay.builds.records import BuildRecord
from buildbay.builds.updaters import UpdaterFields, ed_signature_problem
from buildbay.channels.names import NAME_MAX, NAME_PATTERN
from buildbay.channels.schemas import MAX_CHANNELS_OF_BUILD, ChannelName, ChannelNames
from buildbay.distribution.schemas import DistributionRequest
from buildbay.schemas import ApiModel, JsonInteger, NotNull, RequestModel, Timestamp, Trimmed
from buildbay.text import (
    BIDI_CLASS,
    CONTROL_CLASS,
    INVISIBLE_CLASS,
    NOT_SHOWN_CLASS,
    VERSION_MAX,
    WHITESPACE_CLASS,
    file_name_problem,
)

Architecture = Literal["x64", "arm64", "universal"]

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

Notes = Annotated[str, Field(max_length=MAX_NOTES_LENGTH), Trimmed(blank_ok=True)]


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
    EXAMPLE: ClassVar[dict[str, Any] | None] = {
        "fileName": "app-release.apk",
        "fileSize": 48_213_504,
        "sha256": "3f0a9c1e5b7d2f4a6c8e0b1d3f5a7c9e1b3d5f7a9c1e3b5d7f9a1c3e5b7d9f1a",
    }

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

    multipart: Annotated[bool, Field(strict=True)] = Field(
        default=False,
        description="Upload in parts (resumable, several at once): allowed from 5 MiB, required "
        "above 5 GiB. The answer then has `multipart` and no `uploadUrl`",
    )
    on_duplicate: OnDuplicate = Field(
        default=OnDuplicate.REFUSE,
        description="When `sha256` is a ready build's of the application (a duplicate): "
        "`refuse` (409 `duplicate_build`, naming it) or `reuse` (200 with that build, and "
        "nothing to send)",
    )

    @field_validator("sha256")
    @classmethod
    def _lower(cls, value: str | None) -> str | None:
        return value.lower() if value else value


class MultipartPlan(ApiModel):
    part_size: int = Field(
        description="Bytes in each part but the last (at least 8 MiB); part n starts at "
        "(n - 1) * partSize"
    )
    parts_count: int = Field(description="Parts numbered 1 to partsCount (at most 10,000)")


class UploadLink(ApiModel):
    upload_url: str | None = Field(
        description="Where to PUT the file; null for a multipart upload (ask for part addresses)"
    )
    build_id: str
    expires_at: Timestamp
    upload_method: Literal["PUT"] = "PUT"
    upload_headers: dict[str, str] = Field(
        examples=[{"Content-Type": "application/octet-stream"}],
        description="Headers to send with the PUT",
    )
    multipart: MultipartPlan | None = Field(
        default=None, description="For a multipart upload: how the file is cut into parts"
    )


class PartsRequest(RequestModel):
    EXAMPLE: ClassVar[dict[str, Any] | None] = {"partNumbers": [1, 2, 3, 4]}

    part_numbers: list[Annotated[int, Field(ge=1, le=10_000, strict=True), JsonInteger]] = Field(
        min_length=1, max_length=100, description="The parts to get addresses for"
    )


class PartTarget(ApiModel):
    part_number: int
    url: str = Field(description="PUT exactly this part's bytes here")
    headers: dict[str, str] = Field(description="Headers to send with the PUT")
    expires_at: Timestamp


class PartTargets(ApiModel):
    parts: list[PartTarget]


class ReceivedPart(ApiModel):
    part_number: int
    size: int
    received_at: Timestamp


class ReceivedParts(ApiModel):
    parts: list[ReceivedPart] = Field(description="The parts that have fully arrived, by number")
    part_size: int
    parts_count: int


class StoredPart(ApiModel):
    """The storage address's answer to a successful PUT of a part."""

    build_id: str
    part_number: int
    size: int


class InstallLinkRequest(RequestModel):
    EXAMPLE: ClassVar[dict[str, Any] | None] = {"expiresInHours": 72}

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


# What verify takes for the desktop updaters (builds/updaters.py): versions as CI writes them
# (`1.4.2`, `1.4.2-beta.1+812`, a Debian-style `2:1.4.2~rc1`), an OS version as dotted numbers,
# Sparkle's signature as `sign_update` prints it (base64 of 64 bytes, with its padding).
VERSION_PATTERN = r"^[0-9A-Za-z][0-9A-Za-z.+_~:-]*$"
OS_VERSION_PATTERN = r"^[0-9]{1,9}(\.[0-9]{1,9}){0,3}$"
ED_SIGNATURE_PATTERN = r"^[A-Za-z0-9+/]{86}==$"
GivenVersion = Annotated[str, Field(min_length=1, max_length=VERSION_MAX, pattern=VERSION_PATTERN)]


def _ed_signature(value: str) -> str:
    if problem := ed_signature_problem(value):
        raise ValueError(problem)
    return value


class VerifyRequest(RequestModel):
    EXAMPLE: ClassVar[dict[str, Any] | None] = {
        "buildId": "bld_01JD8Z4K2W8D5V3Q6R7S8T9V0X",
        "notes": "Fixes the crash when signing in offline.",
        "channels": ["default"],
    }

    build_id: Annotated[str, Field(min_length=1, max_length=64)]
    notes: Notes | None = None
    install_link: InstallLinkRequest | None = Field(
        default=None,
        description="Also create an install link; the answer's installUrl is then its address",
    )
    channels: ChannelNames | None = Field(
        default=None,
        description="The release channels to publish the build to, each an existing one; left "
        "out: `default` if the build goes to `everyone` at verify, else none until it does. "
        "Update checks offer only builds distributed to `everyone`",
    )
    mandatory: Annotated[bool, Field(strict=True)] = Field(
        default=False, description="Update checks that find it say the update is mandatory"
    )
    distribute: DistributionRequest | None = Field(
        default=None,
        description="Also distribute the build (as `POST .../builds/{buildId}/distribute`), "
        "besides the application's autoDistributeGroups",
    )
    # For the desktop updaters: what only CI can say about the file.
    architecture: Architecture | None = Field(
        default=None,
        description="The processor architecture the build is for, as desktop updaters tell "
        "them apart (`universal`: one file for both). Where the file names its own (a .deb's "
        "Architecture, an .msix's ProcessorArchitecture, an .exe's machine, an .app's "
        "executable) it must agree (else 422 `metadata_mismatch`); left out, the file's is kept",
    )
    sparkle_ed_signature: (
        Annotated[str, Field(pattern=ED_SIGNATURE_PATTERN), AfterValidator(_ed_signature)] | None
    ) = Field(
        default=None,
        description="Sparkle's EdDSA (Ed25519) signature of the file, base64, as its "
        "`sign_update` tool prints it (`sparkle:edSignature`); Buildbay never holds the key",
    )
    minimum_os_version: Annotated[str, Field(max_length=40, pattern=OS_VERSION_PATTERN)] | None = (
        Field(
            default=None,
            description="The lowest OS version the build runs on (`11.0`, `10.0.17763.0`), for a "
            "file that does not say it; one that does (an .app's LSMinimumSystemVersion, an "
            ".msix's MinVersion) must say the same (else 422 `metadata_mismatch`)",
        )
    )
    version: GivenVersion | None = Field(
        default=None,
        description="The build's version (`1.4.2`), for a file whose version cannot be read "
        "(.dmg, .msi, .AppImage, .tar.gz); kept as `metadata.shortVersion`. A file that says "
        "its own must say the same (else 422 `metadata_mismatch`)",
    )
    build_number: GivenVersion | None = Field(
        default=None,
        description="The build number (Sparkle's `sparkle:version`, CFBundleVersion), for a "
        "file that does not say it; kept as `metadata.buildNumber`",
    )

    def updater_fields(self) -> UpdaterFields | None:
        fields = UpdaterFields(
            architecture=self.architecture,
            sparkle_ed_signature=self.sparkle_ed_signature,
            minimum_os_version=self.minimum_os_version,
            version=self.version,
            build_number=self.build_number,
        )
        return fields if fields != UpdaterFields() else None


RolloutPercent = Annotated[int, Field(strict=True, ge=1, le=100), JsonInteger]


# The document says what the model checks: pydantic would move the names' pattern into
# patternProperties, and leave other names (which the model refuses) unconstrained.
ROLLOUTS_SCHEMA = WithJsonSchema(
    {
        "type": "object",
        "maxProperties": MAX_CHANNELS_OF_BUILD,
        "propertyNames": {"minLength": 1, "maxLength": NAME_MAX, "pattern": NAME_PATTERN},
        "additionalProperties": {"type": "integer", "minimum": 1, "maximum": 100},
    }
)


class BuildChannelsUpdate(RequestModel):
    """The build's channels, and the share of each channel's installs it is offered to (its
    staged rollout: docs/updates.md). A channel's percentage comes from `rolloutPercents`,
    else `rolloutPercent`, else stays what it was; a channel the build joins starts at 100."""

    EXAMPLE: ClassVar[dict[str, Any] | None] = {
        "channels": ["default", "beta"],
        "rolloutPercents": {"default": 10},
    }

    channels: ChannelNames = Field(
        description="The channels the build is published to from now on (an empty list: none)"
    )
    rollout_percent: RolloutPercent | None = Field(
        default=None,
        description="Offer the build to this share of the installs (1-100) of every channel "
        "given that `rolloutPercents` does not name. Left out (or null): each channel keeps its "
        "percentage, and a channel the build joins starts at 100 (every install)",
    )
    rollout_percents: (
        Annotated[
            dict[ChannelName, RolloutPercent],
            Field(max_length=MAX_CHANNELS_OF_BUILD),
            ROLLOUTS_SCHEMA,
        ]
        | None
    ) = Field(
        default=None,
        description="A percentage (1-100) per channel, by name, each one of `channels`: "
        "for a build rolled out further on one channel than on another",
        examples=[{"default": 10, "beta": 100}],
    )

    def rollouts(self) -> dict[str, int]:
        """The percentage asked for each channel that has one asked (a name of
        `rolloutPercents` that `channels` lacks is the service's 422)."""
        given = dict.fromkeys(self.channels, self.rollout_percent) if self.rollout_percent else {}
        return given | (self.rollout_percents or {})


class BuildUpdate(RequestModel):
    """Fields present are changed; fields left out keep their value (at least one is sent)."""

    EXAMPLE: ClassVar[dict[str, Any] | None] = {
        "notes": "Fixes the crash when signing in offline. Try the new settings screen."
    }
    NOT_EMPTY: ClassVar[bool] = True

    mandatory: Annotated[bool, Field(strict=True)] | None = NotNull
    notes: Notes | None = Field(
        default=None, description="The release notes (up to 10,000 characters); null or an "
        "empty string clears them"
    )  # fmt: skip

    @field_validator("mandatory")
    @classmethod
    def _not_null(cls, value: object) -> object:
        # Only reached when the client sent the field: leaving it out keeps it, null is refused.
        if value is None:
            raise ValueError("cannot be null")
        return value

    @model_validator(mode="after")
    def _something(self) -> BuildUpdate:
        if not self.model_fields_set:
            raise ValueError("Send mandatory, notes or both")
        return self


class BuildWarning(ApiModel):
    code: str = Field(
        description="`version_exists`: a ready build of the application has the same version "
        "code with other bytes"
    )
    detail: str = Field(description="The warning in words")
    build_id: str = Field(description="The other build")


class Build(ApiModel):
    build_id: str
    project_id: str
    application_id: str
    file_name: str
    file_size: int
    sha256: str | None = Field(description="Hex SHA-256 of the stored bytes, set at verify")
    sha512: str | None = Field(
        default=None,
        description="Base64 SHA-512 of the stored bytes (as electron-updater reads it), set at "
        "verify; null for a build verified before Buildbay kept it, and for a mobile build "
        "whose bucket knew its SHA-256 without the bytes being read",
    )
    architecture: Architecture | None = Field(
        default=None,
        description="The processor architecture the build is for (`x64`, `arm64`, "
        "`universal`): verify's `architecture`, else the file's own; null if neither says",
    )
    sparkle_ed_signature: str | None = Field(
        default=None, description="Sparkle's EdDSA signature of the file, as verify was given it"
    )
    blockmap_size: int | None = Field(
        default=None,
        description="The size of electron-builder's `.blockmap` attached to the build (`PUT "
        ".../blockmap`), for electron-updater's differential download; null: none",
    )
    status: BuildStatus
    notes: str | None
    created_at: Timestamp
    verified_at: Timestamp | None
    expires_at: Timestamp | None = Field(
        description="Until when a `pending` build's upload link works (it is swept soon after, "
        "unless verified); null once the build is no longer pending: a build never expires"
    )
    uploaded_by: str | None = Field(description="User id of the uploader")
    metadata: dict[str, Any] | None = Field(
        description="What the build file says about itself, where the format is known"
    )
    metadata_error: str | None = Field(
        description="Why `metadata` is null for a file whose name says .apk, .aab or .ipa but "
        "does not parse as one (in an application of another platform than android or ios); "
        "or, for a `pending` or `failed` build, why its last verify was refused",
    )
    download_url: str | None = Field(
        description="The tester download endpoint (302 to the file), once the build is ready"
    )
    install_url: str | None = Field(
        description="The public install page of the build's newest live shared install link, "
        "if any; null for a tester, who installs through a link of their own (their mail's, or "
        "the console's Install), which ends with their access"
    )
    icon_url: str | None = Field(
        description="The app icon the build's file carries (PNG, tester+), if it has one"
    )
    console_url: str | None = Field(
        default=None,
        description="The build's page in the web console (developers and above; null for a "
        "tester, who has no such page)",
    )
    channels: list[str] = Field(
        default_factory=list, description="The release channels the build is published to"
    )
    rollout_percents: dict[str, int] = Field(
        default_factory=dict,
        description="The share of each of its channels' installs (1-100 percent, by channel "
        "name) that update checks offer the build to: its staged rollout (100: every install)",
    )
    mandatory: bool = Field(
        default=False, description="Update checks that find it say the update is mandatory"
    )
    downloads_count: int = Field(
        default=0,
        description="How many times the file was downloaded, through an install link or the API",
    )
    failure_code: str | None = Field(
        default=None,
        description="Why a `failed` build was refused, or why the last verify of a `pending` "
        "one was (e.g. `checksum_mismatch`, `wrong_platform`, `unreadable_build`); "
        "`metadataError` says it in words. Null for a pending build no verify has refused: it "
        "is waiting for its bytes",
    )
    warnings: list[BuildWarning] = Field(
        default_factory=list,
        description="What a developer should know about the build: `version_exists` when a "
        "ready build of the application has its version code with other bytes (the "
        "application's `versionPolicy` `warn`). Empty for a tester",
    )
    new_feedback_count: int | None = Field(
        default=None,
        description="How many of its testers' feedback is still `new` (not yet triaged); null "
        "for a tester, to whom triage is not shown",
    )


class InstallLinkOwner(ApiModel):
    """The person a personal install link is for."""

    user_id: str
    email: str
    name: str | None


class InstallLink(ApiModel):
    link_id: str
    url: str = Field(description="The public install page: share it, or print it from CI")
    manifest_url: str | None = Field(
        description="For an .ipa: the itms-services manifest the page's install button uses"
    )
    shared: bool = Field(
        description="true: anyone holding the link may open it (a developer made it to share, "
        "or an update check did); false: a personal link, for `owner` only"
    )
    owner: InstallLinkOwner | None = Field(
        description="A personal link's person (a distribution mail's, or a tester's own): it "
        "works only while they may open the build; null for a shared link"
    )
    created_by: str | None = Field(
        description="User id of the member who made the link; null when the server made it (a "
        "distribution mail's, an update check's)"
    )
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
    downloads_count: int = 0,
    warnings: list[BuildWarning] | None = None,
    *,
    rollouts: dict[str, int] | None = None,
    console_page: bool = True,
    new_feedback_count: int | None = None,
) -> Build:
    """The build as the API (and a webhook's payload) shows it; `console_page` false for a
    tester, who has no console page of it."""
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
        sha512=build.sha512,
        architecture=build.architecture,
        sparkle_ed_signature=build.sparkle_ed_signature,
        blockmap_size=build.blockmap_size,
        status=build.status,
        notes=build.notes,
        created_at=build.created_at,
        verified_at=build.verified_at,
        expires_at=build.expires_at if build.status is BuildStatus.PENDING else None,
        uploaded_by=build.uploaded_by,
        metadata=build.metadata_,
        metadata_error=build.metadata_error,
        download_url=f"{address}/download" if ready else None,
        install_url=install_url if ready else None,
        icon_url=f"{address}/icon" if build.has_icon else None,
        console_url=f"{public_url}/projects/{build.project_id}/apps/{build.application_id}"
        f"/builds/{build.id}"
        if console_page
        else None,
        channels=channels or [],
        rollout_percents=rollouts or {},
        mandatory=build.mandatory,
        downloads_count=downloads_count,
        failure_code=build.failure_code,
        warnings=warnings or [],
        new_feedback_count=new_feedback_count,
    )

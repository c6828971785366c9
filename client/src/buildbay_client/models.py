"""What the server answers, as the client reads it: plain dataclasses filled from the JSON.

The client carries its own copy of the answers' shape instead of importing the server's models,
so that installing it never pulls in the server (tests/client/test_contract.py checks these
against the server's /openapi.json). Reading is strict about what the client needs (a missing
field or a wrong type is an `AnswerError`) and lenient about the rest: a field a newer server
adds is ignored.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass
from datetime import datetime
from enum import Enum, StrEnum
from typing import Any, ClassVar, Literal, TypeVar, get_args, get_origin, get_type_hints

M = TypeVar("M", bound="Model")

# The longest release notes verify accepts: checked before any byte is sent.
MAX_NOTES_LENGTH = 10_000


class AnswerError(ValueError):
    """A JSON answer that is not the shape this client knows."""


class Model:
    """Base of the answers: `from_json` reads one, `to_json` writes it back as the server did."""

    # The API names fields in camelCase; OAuth token answers (RFC 6749) in snake_case.
    JSON_CASE: ClassVar[Literal["camel", "snake"]] = "camel"

    @classmethod
    def from_json(cls: type[M], data: Any) -> M:
        return typing.cast("M", _read(cls, data, cls.__name__))

    def to_json(self) -> dict[str, Any]:
        return typing.cast("dict[str, Any]", to_json(self))


class Plan(StrEnum):
    FREE = "free"
    PRO = "pro"
    ENTERPRISE = "enterprise"


class ProjectRole(StrEnum):
    TESTER = "tester"
    DEVELOPER = "developer"
    ADMIN = "admin"
    OWNER = "owner"


class Platform(StrEnum):
    ANDROID = "android"
    IOS = "ios"
    MACOS = "macos"
    WINDOWS = "windows"
    LINUX = "linux"
    OTHER = "other"


class VersionPolicy(StrEnum):
    """What verify does with a version code a ready build of other bytes already has."""

    WARN = "warn"  # the build is ready, with a `version_exists` warning
    UNIQUE = "unique"  # refused: 409 `version_exists`


class FeedbackMode(StrEnum):
    """Who may send feedback on an application's builds."""

    TESTERS_ONLY = "testers-only"  # its testers to whom a build is distributed, and developers
    ANYONE_WITH_UPDATE_KEY = "anyone-with-update-key"  # also an app with the key and an e-mail


class BuildStatus(StrEnum):
    PENDING = "pending"
    READY = "ready"
    PROCESSING = "processing"  # a large build in parts, checked after verify answered 202
    FAILED = "failed"  # that check refused it: see `failure_code`


# -- accounts -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class User(Model):
    id: str
    email: str
    name: str
    plan: Plan
    created_at: datetime
    email_verified: bool  # the address proved by a mailed link (or not yet)


@dataclass(frozen=True)
class Usage(Model):
    storage_bytes: int
    builds: int


@dataclass(frozen=True)
class Limits(Model):
    storage_quota_bytes: int | None  # None: no limit
    max_upload_bytes: int
    requests_per_minute: int | None  # None: no limit


@dataclass(frozen=True)
class Me(User):
    usage: Usage
    limits: Limits
    # Whether new-build mails are sent to the user (a server before them: True).
    notify_new_builds: bool = True
    # A new address waiting for its confirmation (the account page's e-mail change), or None.
    pending_email: str | None = None


@dataclass(frozen=True)
class TokenResponse(Model):
    JSON_CASE: ClassVar[Literal["camel", "snake"]] = "snake"

    access_token: str
    refresh_token: str
    expires_in: int
    user: User
    token_type: str = "Bearer"


class TokenScope(StrEnum):
    """What an API token may do; a token without one may do all its user may."""

    READ = "read"
    UPLOAD = "upload"  # also upload builds (a trusted publisher's token has it)
    BUILDS_WRITE = "builds:write"


@dataclass(frozen=True)
class ApiToken(Model):
    id: str
    name: str
    prefix: str
    created_at: datetime
    expires_at: datetime | None
    last_used_at: datetime | None
    # Absent from servers older than token scopes: their tokens have no limits.
    scope: TokenScope | None = None
    project_ids: list[str] | None = None  # None: every project of the user


@dataclass(frozen=True, kw_only=True)
class CreatedApiToken(ApiToken):
    token: str  # the secret, shown this once


@dataclass(frozen=True)
class ApiTokenList(Model):
    api_tokens: list[ApiToken]


@dataclass(frozen=True, kw_only=True)
class CliToken(CreatedApiToken):
    """`buildbay login --sso`'s API token ("CLI on <computer>"), and whose it is."""

    user: User


@dataclass(frozen=True)
class DeviceCode(Model):
    """A device sign-in started (RFC 8628): the person enters `user_code` at
    `verification_uri` while the command line polls with `device_code`."""

    device_code: str
    user_code: str
    verification_uri: str
    verification_uri_complete: str
    expires_in: int
    interval: int


# -- projects and members -----------------------------------------------------------------------


@dataclass(frozen=True)
class Project(Model):
    id: str
    name: str
    applications_count: int
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class ProjectList(Model):
    projects: list[Project]
    next_cursor: str | None


@dataclass(frozen=True)
class Member(Model):
    user_id: str
    email: str
    name: str
    role: ProjectRole
    created_at: datetime
    email_verified: bool  # "e-mail not verified" where false


@dataclass(frozen=True)
class MemberList(Model):
    members: list[Member]


# -- applications -------------------------------------------------------------------------------


@dataclass(frozen=True)
class RetentionProtect(Model):
    """The builds retention keeps whatever its rule says: the newest given to each tester group,
    and the newest of each channel."""

    groups: bool = True
    channels: bool = True


@dataclass(frozen=True)
class Retention(Model):
    keep_last: int | None
    keep_days: int | None
    # What it always keeps (a server before it: nothing said, both on by its default).
    protect: RetentionProtect = dataclasses.field(default_factory=RetentionProtect)


@dataclass(frozen=True)
class Application(Model):
    id: str
    project_id: str
    name: str
    platform: Platform
    bundle_id: str | None
    retention: Retention  # both None: every build is kept
    builds_count: int  # ready builds
    created_at: datetime
    updated_at: datetime
    # For the update check (public; shown to developers and above). Defaults: a server before
    # in-app updates does not send them.
    update_key: str | None = None
    # Tester groups each ready build is distributed to, and the life of the install link in
    # each tester's mail (a server before groups does not send them).
    auto_distribute_groups: list[str] = dataclasses.field(default_factory=lambda: ["everyone"])
    install_link_days: int = 14
    version_policy: VersionPolicy = VersionPolicy.WARN  # a server before it does not send it
    feedback_mode: FeedbackMode = FeedbackMode.TESTERS_ONLY  # nor before feedback


@dataclass(frozen=True)
class ApplicationWarning(Model):
    code: str  # `renamed`: CI jobs naming the application by its old name must change
    detail: str


@dataclass(frozen=True)
class ApplicationUpdated(Application):
    """An update's answer: the application, and what the change may break elsewhere."""

    warnings: list[ApplicationWarning] = dataclasses.field(default_factory=list)


@dataclass(frozen=True)
class ApplicationList(Model):
    applications: list[Application]
    next_cursor: str | None


@dataclass(frozen=True)
class RetentionPreviewBuild(Model):
    build_id: str
    file_name: str
    version: str | None  # as people read it: `1.4.2 (42)`
    verified_at: datetime | None
    distributed: bool  # given to a tester group or to someone by e-mail: in testers' hands


@dataclass(frozen=True)
class RetentionPreview(Model):
    """The ready builds a retention rule deletes now (on the sweeper's next round, once it is
    saved), newest first; nothing is changed by asking."""

    count: int
    distributed_count: int  # how many of them are in testers' hands
    builds: list[RetentionPreviewBuild]


@dataclass(frozen=True)
class Channel(Model):
    id: str
    name: str
    builds_count: int  # ready builds published to it
    latest_build_id: str | None
    created_at: datetime


@dataclass(frozen=True)
class ChannelList(Model):
    channels: list[Channel]


@dataclass(frozen=True)
class Group(Model):
    """A tester group of a project (`everyone`: all its members)."""

    id: str
    name: str
    testers_count: int
    created_at: datetime


@dataclass(frozen=True)
class GroupList(Model):
    groups: list[Group]
    next_cursor: str | None


# -- builds -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MultipartPlan(Model):
    part_size: int  # every part but the last; part n starts at (n - 1) * part_size
    parts_count: int


@dataclass(frozen=True)
class UploadLink(Model):
    upload_url: str | None  # None for an upload in parts
    build_id: str
    expires_at: datetime
    upload_headers: dict[str, str]  # to send with the PUT
    upload_method: str = "PUT"
    multipart: MultipartPlan | None = None


@dataclass(frozen=True)
class PartTarget(Model):
    part_number: int
    url: str
    headers: dict[str, str]
    expires_at: datetime


@dataclass(frozen=True)
class PartTargets(Model):
    parts: list[PartTarget]


@dataclass(frozen=True)
class ReceivedPart(Model):
    part_number: int
    size: int
    received_at: datetime


@dataclass(frozen=True)
class ReceivedParts(Model):
    parts: list[ReceivedPart]
    part_size: int
    parts_count: int


@dataclass(frozen=True)
class BuildWarning(Model):
    """What a developer should know about a build (`version_exists`: `build_id` has its version
    code with other bytes)."""

    code: str
    detail: str
    build_id: str


@dataclass(frozen=True)
class SourceLinks(Model):
    """Pages of the repository's host (GitHub, GitLab, Bitbucket), each http(s) or None."""

    repository: str | None
    commit: str | None
    branch: str | None
    tag: str | None
    pull_request: str | None


@dataclass(frozen=True)
class Source(Model):
    """Where a build came from, as verify was told (docs/ci.md)."""

    commit: str | None
    branch: str | None
    tag: str | None
    repository: str | None
    ci_run_url: str | None
    pull_request: Any | None  # its number (int), or its address (str), as given
    links: SourceLinks


@dataclass(frozen=True)
class Build(Model):
    build_id: str
    project_id: str
    application_id: str
    file_name: str
    file_size: int
    sha256: str | None
    status: BuildStatus
    notes: str | None
    created_at: datetime
    verified_at: datetime | None
    expires_at: datetime | None  # a pending build's upload link; null once it is not pending
    uploaded_by: str | None
    metadata: dict[str, Any] | None  # what the file says about itself, where the format is known
    metadata_error: str | None
    download_url: str | None
    install_url: str | None
    icon_url: str | None
    console_url: str | None = None  # its console page (developers'; null for a tester)
    channels: list[str] = dataclasses.field(default_factory=list)  # release channels
    # The share (1-100 percent) of each channel's installs that update checks offer it to.
    rollout_percents: dict[str, int] = dataclasses.field(default_factory=dict)
    mandatory: bool = False  # update checks that find it say the update is mandatory
    downloads_count: int = 0  # through install links and the API
    failure_code: str | None = None  # why a `failed` build was refused (metadata_error says it)
    warnings: list[BuildWarning] = dataclasses.field(default_factory=list)
    new_feedback_count: int | None = None  # its feedback still `new` (null for a tester)
    # For the desktop updaters: base64 SHA-512 (a desktop application's build), `x64`, `arm64`
    # or `universal`, and Sparkle's EdDSA signature as verify was given it.
    sha512: str | None = None
    architecture: str | None = None
    sparkle_ed_signature: str | None = None
    blockmap_size: int | None = None  # electron-builder's `.blockmap` attached (attach_blockmap)
    source: Source | None = None  # where it came from (a server before it: None)


@dataclass(frozen=True)
class ReusedBuild(Build):
    """Not an answer of the server's but what `upload_build` gives when the file was already a
    ready build of the application (its bytes' SHA-256): that build, with what the upload asked
    (distribution, channels, install link) applied to it. `sent`: whether this upload's bytes
    went before the server found it (two uploads of the file at once); they were dropped.
    Both are written in `--json` output."""

    reused: bool = True
    sent: bool = False

    @classmethod
    def of(cls, build: Build, *, sent: bool) -> ReusedBuild:
        values = {f.name: getattr(build, f.name) for f in dataclasses.fields(Build)}
        return cls(**values, sent=sent)


@dataclass(frozen=True)
class BuildList(Model):
    builds: list[Build]
    next_cursor: str | None


@dataclass(frozen=True)
class NotInvited(Model):
    email: str
    reason: str  # blocked, recipient_limit, account_limit, ...: the server's words, as it adds
    detail: str  # the reason as a sentence


@dataclass(frozen=True)
class Distribution(Model):
    """What distributing a build did."""

    build_id: str
    groups: list[str]  # every group the build is distributed to, not only this call's
    testers_reached: int  # members newly reached by this call (never the uploader)
    notified: int  # of them, how many are being mailed
    invited: list[str] = dataclasses.field(default_factory=list)  # e-mails invited as testers
    not_invited: list[NotInvited] = dataclasses.field(default_factory=list)
    invitations_pending: int = 0  # invited to its groups, not signed up yet: reached on joining
    unsubscribed: int = 0  # of those reached, how many turned new-build mail off


@dataclass(frozen=True)
class InstallLinkOwner(Model):
    """The person a personal install link is for."""

    user_id: str
    email: str
    name: str | None


@dataclass(frozen=True)
class InstallLink(Model):
    link_id: str
    url: str
    manifest_url: str | None
    created_by: str | None
    created_at: datetime
    expires_at: datetime
    revoked_at: datetime | None
    shared: bool = True  # false: a personal link, for `owner` only
    owner: InstallLinkOwner | None = None


@dataclass(frozen=True)
class InstallLinkList(Model):
    install_links: list[InstallLink]


# -- testers' devices ---------------------------------------------------------------------------


@dataclass(frozen=True)
class DeviceTester(Model):
    """The project member a device belongs to."""

    id: str
    email: str
    name: str


@dataclass(frozen=True)
class ProfileInclusion(Model):
    """An iOS application's newest ready ad-hoc or development .ipa, against one device."""

    application_id: str
    build_id: str
    included: bool | None  # None: the build's profile devices are not known


@dataclass(frozen=True)
class ProjectDevice(Model):
    """A device a member of the project enrolled, with its tester."""

    id: str
    udid: str
    name: str
    model: str  # the product: iPhone14,2
    os_version: str
    platform: str  # ios, ipados, macos (a string: a newer server may add one)
    serial: str | None
    tester_id: str
    enrolled_at: datetime
    last_seen_at: datetime
    tester: DeviceTester
    # By application id, for each iOS application; None where it has no ad-hoc build.
    in_profile_of_latest: dict[str, ProfileInclusion | None]


@dataclass(frozen=True)
class LatestProfile(Model):
    """An iOS application of the project, and the build `in_profile_of_latest` looks at."""

    application_id: str
    name: str
    build_id: str | None


@dataclass(frozen=True)
class ProjectDeviceList(Model):
    devices: list[ProjectDevice]
    applications: list[LatestProfile]
    next_cursor: str | None


# -- reading and writing JSON -------------------------------------------------------------------


def json_name(model: type[Model], field: str) -> str:
    """The name of a field in the server's JSON."""
    if model.JSON_CASE == "snake":
        return field
    first, *rest = field.split("_")
    return first + "".join(part.title() for part in rest)


_FIELDS: dict[type[Model], tuple[tuple[str, Any, bool], ...]] = {}


def fields_of(model: type[Model]) -> tuple[tuple[str, Any, bool], ...]:
    """(name, type, required) of each field of a model (its type hints resolved once)."""
    if model not in _FIELDS:
        hints = get_type_hints(model)
        _FIELDS[model] = tuple(
            (
                f.name,
                hints[f.name],
                f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING,
            )
            for f in dataclasses.fields(model)  # type: ignore[arg-type]
        )
    return _FIELDS[model]


def _read(kind: Any, value: Any, where: str) -> Any:
    origin = get_origin(kind)
    if kind is Any:
        return value
    if origin is types.UnionType or origin is typing.Union:
        options = [option for option in get_args(kind) if option is not type(None)]
        if value is None and len(options) < len(get_args(kind)):
            return None
        (only,) = options  # the models use `X | None` alone
        return _read(only, value, where)
    if origin is list:
        _expect(isinstance(value, list), "a list", value, where)
        (item,) = get_args(kind)
        return [_read(item, v, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        _expect(isinstance(value, dict), "an object", value, where)
        _, item = get_args(kind)
        return {str(k): _read(item, v, f"{where}.{k}") for k, v in value.items()}
    if isinstance(kind, type) and issubclass(kind, Model):
        _expect(isinstance(value, dict), "an object", value, where)
        found: dict[str, Any] = {}
        for name, field_kind, required in fields_of(kind):
            key = json_name(kind, name)
            if key in value:
                found[name] = _read(field_kind, value[key], f"{where}.{key}")
            elif required:
                raise AnswerError(f"{where}.{key} is missing")
        return kind(**found)
    if isinstance(kind, type) and issubclass(kind, Enum):
        try:
            return kind(value)
        except ValueError:
            raise AnswerError(f"{where} is {value!r}, which this client does not know") from None
    if kind is datetime:
        _expect(isinstance(value, str), "a date and time", value, where)
        try:
            return datetime.fromisoformat(value)
        except ValueError:
            raise AnswerError(f"{where} is {value!r}, not a date and time") from None
    if kind is int:
        _expect(
            isinstance(value, int) and not isinstance(value, bool), "a whole number", value, where
        )
        return value
    if kind is str:
        _expect(isinstance(value, str), "a string", value, where)
        return value
    if kind is bool:
        _expect(isinstance(value, bool), "true or false", value, where)
        return value
    raise TypeError(f"{where}: the client's model has a type it cannot read: {kind!r}")


def _expect(ok: bool, what: str, value: Any, where: str) -> None:
    if not ok:
        raise AnswerError(f"{where} should be {what}, not {type(value).__name__}")


def to_json(value: Any) -> Any:
    """A model (or a list of them) as the server wrote it: its JSON names, ISO 8601 times."""
    if isinstance(value, Model):
        kind = type(value)
        return {
            json_name(kind, name): to_json(getattr(value, name)) for name, _, _ in fields_of(kind)
        }
    if isinstance(value, list | tuple):
        return [to_json(v) for v in value]
    if isinstance(value, dict):
        return {k: to_json(v) for k, v in value.items()}
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, datetime):
        return value.isoformat().replace("+00:00", "Z")
    return value


# -- webhooks -----------------------------------------------------------------------------------


class DeliveryStatus(StrEnum):
    PENDING = "pending"
    DELIVERED = "delivered"
    FAILED = "failed"


@dataclass(frozen=True)
class Webhook(Model):
    id: str
    url: str
    events: list[str]
    description: str
    enabled: bool
    created_at: datetime
    format: str = "standard"  # or a chat's message: slack, discord, teams, google-chat
    suggested_format: str | None = None  # the chat format the URL looks like it needs
    disabled_reason: str | None = None
    failing_since: datetime | None = None
    last_delivery_at: datetime | None = None


@dataclass(frozen=True, kw_only=True)
class WebhookCreated(Webhook):
    secret: str  # `whsec_...`, shown this once


@dataclass(frozen=True)
class WebhookList(Model):
    webhooks: list[Webhook]


@dataclass(frozen=True)
class DeliveryAccepted(Model):
    delivery_id: str | None


@dataclass(frozen=True)
class Delivery(Model):
    id: str
    event_id: str
    event_type: str
    status: DeliveryStatus
    attempts: int
    created_at: datetime
    next_attempt_at: datetime | None = None
    last_status_code: int | None = None
    last_error: str | None = None
    last_duration_ms: int | None = None
    delivered_at: datetime | None = None


@dataclass(frozen=True)
class DeliveryList(Model):
    deliveries: list[Delivery]
    next_cursor: str | None


# -- feedback (the team's side) -----------------------------------------------------------------


class FeedbackCategory(StrEnum):
    BUG = "bug"
    CRASH = "crash"
    SUGGESTION = "suggestion"
    OTHER = "other"


class FeedbackStatus(StrEnum):
    NEW = "new"
    TRIAGED = "triaged"
    RESOLVED = "resolved"
    WONT_FIX = "wont-fix"


@dataclass(frozen=True)
class FeedbackTester(Model):
    id: str
    email: str


@dataclass(frozen=True)
class FeedbackScreenshot(Model):
    id: str
    width: int
    height: int
    bytes: int
    url: str  # a short-lived signed address of the image


@dataclass(frozen=True)
class FeedbackPerson(Model):
    id: str
    name: str
    email: str | None  # None to a tester


@dataclass(frozen=True)
class TeamFeedback(Model):
    id: str
    build_id: str
    tester: FeedbackTester | None  # None: an app's reporter (reporter_email), or a gone account
    reporter_email: str
    category: FeedbackCategory
    text: str
    context: dict[str, Any] | None  # what the device said of itself
    screenshots: list[FeedbackScreenshot]
    status: FeedbackStatus
    created_at: datetime
    updated_at: datetime
    project_id: str
    application_id: str
    application_name: str
    build_version: str | None
    assignee: FeedbackPerson | None
    comments_count: int


@dataclass(frozen=True)
class FeedbackList(Model):
    feedback: list[TeamFeedback]
    next_cursor: str | None


@dataclass(frozen=True)
class FeedbackComment(Model):
    id: str
    feedback_id: str
    author: FeedbackPerson | None
    text: str
    created_at: datetime


@dataclass(frozen=True)
class FeedbackCommentList(Model):
    comments: list[FeedbackComment]
    next_cursor: str | None

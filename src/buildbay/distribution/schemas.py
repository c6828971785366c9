from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import AwareDatetime, Field

from buildbay.auth.schemas import EMAIL_VERIFIED_DESCRIPTION
from buildbay.projects.enums import ProjectRole
from buildbay.schemas import ApiModel, Email, Name, RequestModel, Timestamp

GroupId = Annotated[str, Field(min_length=1, max_length=32, pattern=r"^[A-Za-z0-9_]+$")]
Emails = Annotated[list[Email], Field(max_length=1000)]


class GroupCreate(RequestModel):
    EXAMPLE: ClassVar[dict[str, Any] | None] = {"name": "QA team"}

    name: Name


class Group(ApiModel):
    id: str = Field(description="`everyone` for the built-in group of all the project's members")
    name: str
    testers_count: int
    created_at: Timestamp


class GroupList(ApiModel):
    groups: list[Group]
    next_cursor: str | None


class TestersAdd(RequestModel):
    EXAMPLE: ClassVar[dict[str, Any] | None] = {
        "emails": ["tester@example.com", "new.tester@example.com"]
    }

    emails: Annotated[Emails, Field(min_length=1)]


class Tester(ApiModel):
    user_id: str
    email: str
    name: str
    role: ProjectRole
    added_at: Timestamp
    email_verified: bool = Field(description=EMAIL_VERIFIED_DESCRIPTION)


class TesterList(ApiModel):
    testers: list[Tester]


class NotInvited(ApiModel):
    email: str
    reason: Literal[
        "blocked", "recipient_limit", "account_limit", "unverified_account_limit", "project_limit"
    ] = Field(
        description="`blocked`: the address refuses invitations from this server; the others: "
        "a day's invitation cap (the address's, the inviting account's, the project's) is spent; "
        "`unverified_account_limit`: the inviting account's, smaller until it verifies its "
        "e-mail address"
    )
    detail: str = Field(description="The reason as a sentence")


class TestersAdded(ApiModel):
    testers: list[Tester] = Field(description="The members named, now in the group")
    invited: list[str] = Field(
        description="E-mails of people who are not members: invited into the project as "
        "testers (a pending invitation keeps its role), they join the group when they accept"
    )
    not_invited: list[NotInvited] = Field(
        default_factory=list,
        description="E-mails of non-members that were not invited (nor mailed), and why",
    )


class DistributionRequest(RequestModel):
    EXAMPLE: ClassVar[dict[str, Any] | None] = {
        "groups": ["everyone"],
        "emails": ["tester@example.com"],
        "notify": True,
    }

    groups: list[GroupId] = Field(default_factory=list, max_length=100)
    emails: Emails = Field(default_factory=list)
    notify: Annotated[bool, Field(strict=True)] = Field(
        default=True,
        description="Mail each newly reached tester (who takes new-build mails) their own "
        "install link",
    )


class Distribution(ApiModel):
    build_id: str
    groups: list[str] = Field(description="Every group the build is distributed to")
    testers_reached: int = Field(
        description="Members this call reached who had not been reached before; the build's "
        "uploader is not counted, people not signed up yet are `invitationsPending`"
    )
    notified: int = Field(description="Of them, how many are being mailed")
    invitations_pending: int = Field(
        default=0,
        description="People this call newly gave the build who have not joined the project "
        "yet (e-mails named, and invitations pending into the groups): they have it when they "
        "accept, and are mailed the newest build of each application then",
    )
    unsubscribed: int = Field(
        default=0,
        description="Of the testers reached, those not mailed because they turned new-build "
        "mails off (0 when the call does not notify)",
    )
    invited: list[str] = Field(
        default_factory=list,
        description="The e-mails named that are not members': invited into the project as "
        "testers (a pending invitation stays as it is)",
    )
    not_invited: list[NotInvited] = Field(
        default_factory=list,
        description="E-mails of non-members that were not invited, and why: not reached",
    )


class TesterInstalls(ApiModel):
    user_id: str | None = Field(description="Null for an e-mail invited that has not joined yet")
    email: str | None
    name: str | None
    reached_at: Timestamp | None = Field(
        description="When the build was distributed to them; null if it never was (a developer "
        "who downloaded it)"
    )
    notified_at: Timestamp | None = Field(description="When their mail was sent, if it was")
    mail_error: str | None = Field(
        description="Why their new-build mail could not be sent (an address mail cannot "
        "reach), if it could not; the others were mailed"
    )
    first_opened_at: Timestamp | None = Field(description="Their first open of an install page")
    last_downloaded_at: Timestamp | None
    downloads: int
    platforms: list[str] = Field(
        description="The platforms they opened or downloaded it from (`ios`, `android`, "
        "`windows`, `macos`, `chromeos`, `linux`, `other`)"
    )


class DistributedTo(ApiModel):
    kind: Literal["group", "person"]
    id: str = Field(description="The group's id (`everyone` included), or the person's e-mail")
    name: str = Field(description="The group's name, or the person's (their e-mail without an "
                      "account)")  # fmt: skip
    distributed_by: str | None = Field(
        description="Who distributed it, by name; null when not known (before this was kept) "
        "or the account was deleted"
    )
    distributed_at: Timestamp | None = Field(description="When; null when not known")
    deleted: bool = Field(description="A group deleted since")


class Installs(ApiModel):
    build_id: str
    testers: list[TesterInstalls] = Field(description="By e-mail; then people never reached")
    anonymous_opens: int = Field(description="Opens of install links that are nobody's own")
    anonymous_downloads: int
    downloads_count: int = Field(description="Every download of the build")
    distributed_to: list[DistributedTo] = Field(
        default_factory=list,
        description="The groups (`everyone` first) and the people named by e-mail it was "
        "distributed to, with who did it and when",
    )
    testers_reached: int = Field(
        default=0, description="Members the build reached; its uploader is not counted"
    )
    invited_not_signed_up: list[str] = Field(
        default_factory=list,
        description="E-mails invited into the project that have the build when they accept "
        "(named by e-mail, or invited into a group it went to)",
    )
    unsubscribed: int = Field(
        default=0, description="Of the testers reached, those who turned new-build mails off"
    )


class JoinLinkCreate(RequestModel):
    EXAMPLE: ClassVar[dict[str, Any] | None] = {
        "maxTesters": 100,
        "allowedEmailDomains": ["example.com"],
        "expiresAt": "2030-01-01T00:00:00Z",
    }

    max_testers: int | None = Field(
        default=None,
        ge=1,
        le=10000,
        description="How many may join through the link (1..10,000); absent or null: no limit",
    )
    allowed_email_domains: Annotated[
        list[Annotated[str, Field(min_length=1, max_length=253)]], Field(max_length=50)
    ] = Field(
        default_factory=list,
        description="Only addresses of these domains may join (compared after NFKC and IDNA); "
        "empty: any",
    )
    expires_at: AwareDatetime | None = Field(
        default=None,
        description="When the link stops taking anyone (in the future); absent or null: never",
    )


class JoinLink(ApiModel):
    id: str
    group_id: str
    state: Literal["live", "expired", "full"] = Field(
        description="`live`: it takes people; `expired`: past `expiresAt`; `full`: "
        "`joinedCount` reached `maxTesters`"
    )
    max_testers: int | None
    allowed_email_domains: list[str] = Field(description="Normalised: lower case, IDNA's ASCII")
    expires_at: Timestamp | None
    created_at: Timestamp
    joined_count: int = Field(
        description="How many joined the group through this link; those removed since still "
        "count (they used a place of `maxTesters`)"
    )
    in_group_count: int = Field(
        description="Of those who joined through this link, how many are in the group now"
    )
    confirmation_mails_today: int = Field(
        description="Confirmation mails the link's page sent this UTC day"
    )
    confirmation_mails_per_day: int | None = Field(
        description="The link's budget of confirmation mails a UTC day "
        "(BUILDBAY_JOIN_LINK_MAILS_PER_DAY); once spent, its page takes no more requests "
        "until the next day. Null: no cap"
    )


class JoinLinkCreated(JoinLink):
    url: str = Field(
        description="The public join page: shown this once (only its hash is stored); "
        "making a new link is the way to see one again"
    )

"""Settings, read from the environment with the prefix ``BUILDBAY_``."""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from enum import StrEnum
from functools import cached_property
from pathlib import Path
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from buildbay.devices.cms import ProfileSigner, SigningSetupError

GiB = 1024**3
MiB = 1024**2
MIN_SECRET_KEY_LENGTH = 32
SECRET_KEY_FILE = "secret_key"


# The schemes BUILDBAY_DATABASE_URL may have, and the driver each runs on.
DATABASE_DRIVERS = {
    "postgres": "postgresql+asyncpg",
    "postgresql": "postgresql+asyncpg",
    "postgresql+asyncpg": "postgresql+asyncpg",
    "sqlite": "sqlite+inline",
    "sqlite+inline": "sqlite+inline",
    "sqlite+aiosqlite": "sqlite+aiosqlite",
}


class Environment(StrEnum):
    DEVELOPMENT = "development"
    PRODUCTION = "production"


class Plan(StrEnum):
    FREE = "free"
    PRO = "pro"
    ENTERPRISE = "enterprise"


class SignupMode(StrEnum):
    """Who may create an account (BUILDBAY_SIGNUP)."""

    OPEN = "open"  # anyone
    INVITE_ONLY = "invite-only"  # an e-mail a project invited (and not yet accepted or expired)
    CLOSED = "closed"  # nobody: the operator creates accounts (`buildbay users create`)


class StorageKind(StrEnum):
    LOCAL = "local"  # files under DATA_DIR, served by the API process
    S3 = "s3"  # an S3-compatible bucket; clients use presigned URLs


@dataclass(frozen=True, slots=True)
class InvitationCaps:
    """Invitation mails a day (None: no cap)."""

    per_recipient: int | None
    per_account: int | None
    per_project: int | None
    # An account whose e-mail address is not verified: at most this, whatever its plan.
    per_unverified_account: int | None = None


class ConfigurationError(Exception):
    """The configuration cannot run a server; the message tells the operator what to set."""


PositiveInt = Annotated[int, Field(gt=0)]
NonNegativeInt = Annotated[int, Field(ge=0)]


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="BUILDBAY_", extra="ignore")

    env: Environment = Environment.DEVELOPMENT
    data_dir: Path = Path("./data")
    database_url: str | None = None
    # PostgreSQL connections each process keeps in each of its two pools (read-only requests',
    # units of work); it opens no more.
    database_pool_size: PositiveInt = 10
    secret_key: SecretStr | None = None
    public_url: str | None = None
    redis_url: str | None = None
    host: str = "127.0.0.1"
    port: int = 8000

    upload_link_ttl_seconds: PositiveInt = 3600
    # A multipart upload (a large build, in parts): how long it may take from its upload link to
    # verify; each part's address still lives upload_link_ttl_seconds at most.
    multipart_upload_ttl_seconds: PositiveInt = 24 * 3600
    # A multipart build larger than this is checked (sha256, metadata) in the background: verify
    # answers 202 and the build is `processing` until it is `ready` or `failed`.
    verify_inline_max_bytes: PositiveInt = 512 * MiB
    download_link_ttl_seconds: PositiveInt = 300
    access_token_ttl_seconds: PositiveInt = 24 * 3600
    refresh_token_ttl_days: PositiveInt = 30
    # `buildbay login --sso --device` (auth/cli_sign_in.py): the least seconds between the
    # command line's polls (RFC 8628's `interval`).
    cli_device_poll_interval_seconds: PositiveInt = 5

    max_upload_bytes_free: PositiveInt = 1 * GiB
    max_upload_bytes_pro: PositiveInt = 4 * GiB
    max_upload_bytes_enterprise: PositiveInt = 10 * GiB
    # Storage per user (the builds they uploaded, pending ones included); 0 means unlimited.
    quota_bytes_free: NonNegativeInt = 5 * GiB
    quota_bytes_pro: NonNegativeInt = 100 * GiB
    quota_bytes_enterprise: NonNegativeInt = 0

    rate_limit_enabled: bool = True
    rate_limit_free_per_minute: PositiveInt = 100
    rate_limit_pro_per_minute: PositiveInt = 1000
    login_failures_per_minute: PositiveInt = 10
    # The public update check (docs/updates.md): per client IP, and per application (its update
    # keys together), each in a moving minute.
    update_checks_per_minute_per_ip: PositiveInt = 120
    # Install pages, their downloads, manifests and icons: per client IP, apart from the API's
    # anonymous budget (100 a minute: about 25 testers behind one office NAT).
    install_pages_per_minute_per_ip: PositiveInt = 600
    update_checks_per_minute_per_key: PositiveInt = 6000
    # Feedback sent on builds (feedback/): per reporter (a member, an install link's person, a
    # reporter's e-mail given with an update key) and per client IP, each in a moving minute.
    feedback_per_minute_per_reporter: PositiveInt = 10
    feedback_per_minute_per_ip: PositiveInt = 30
    # ... and per application, of what apps send with its update key: each names whatever
    # reporter it likes, from as many addresses as it has (an IPv6 host has 2^64).
    feedback_per_minute_per_update_key: PositiveInt = 60

    # Invitation mails (docs/operations.md, "Invitation caps"), each in a UTC day, 0 for no cap:
    # to one address whatever project invites it (resends included); sent by one account (its
    # plan); sent for one project (the plan of its best-paid owner).
    invitations_per_recipient_per_day: NonNegativeInt = 3
    invitations_per_account_per_day_free: NonNegativeInt = 100
    invitations_per_account_per_day_pro: NonNegativeInt = 1000
    invitations_per_account_per_day_enterprise: NonNegativeInt = 10000
    invitations_per_project_per_day_free: NonNegativeInt = 200
    invitations_per_project_per_day_pro: NonNegativeInt = 2000
    invitations_per_project_per_day_enterprise: NonNegativeInt = 20000
    # An account that has not verified its e-mail address sends at most this many a day,
    # whatever its plan (a throwaway account must not reach a plan's hundred strangers).
    invitations_per_account_per_day_unverified: NonNegativeInt = 10
    # A public join link's confirmation mails (distribution/join_links.py), in a UTC day: per
    # link, whatever addresses are given on its page (0: no cap), and per address, whatever
    # link it is given on. Their own budget, apart from the invitation caps above: whoever
    # holds a public link must not spend the team's invitations of the day.
    join_link_mails_per_day: NonNegativeInt = 200
    join_link_mails_per_address_per_day: PositiveInt = 3
    # Verification mails asked for again (POST /api/auth/email-verification, the console's
    # "send it again"), per address in a UTC day (the sign-up's own mail not counted).
    verification_mails_per_address_per_day: PositiveInt = 3

    sweep_interval_seconds: Annotated[int, Field(ge=0)] = 300
    # The audit log keeps an entry this many days; the sweeper deletes older ones (audit/).
    audit_retention_days: PositiveInt = 365
    # How long a request body may take to arrive (an upload's: the longest pause between two
    # of its chunks); past it the answer is 408 and the connection is closed.
    body_read_timeout_seconds: Annotated[float, Field(gt=0)] = 30.0
    # Reading what a build file says (builds/readers.py): in at most PARSE_PROCESSES processes
    # of each server process, each file within PARSE_CPU_SECONDS of processor time and
    # PARSE_MEMORY_MIB of memory (address space), and within PARSE_TIMEOUT_SECONDS of the
    # verify's call (waiting for a process included); past a limit the process is killed and
    # the file is unreadable. A process reads PARSE_FILES_PER_PROCESS files, then a fresh one
    # takes over (1: a process per file).
    parse_processes: PositiveInt = 2
    parse_cpu_seconds: Annotated[float, Field(gt=0)] = 10.0
    parse_memory_mib: Annotated[int, Field(ge=64)] = 1024
    parse_timeout_seconds: Annotated[float, Field(gt=0)] = 30.0
    parse_files_per_process: PositiveInt = 100

    storage: StorageKind = StorageKind.LOCAL
    s3_bucket: str | None = None
    s3_endpoint_url: str | None = None  # empty for AWS; e.g. http://minio:9000
    s3_region: str | None = None
    s3_prefix: str = ""

    # Mail: `smtp://user:pass@host:587` (STARTTLS; required when the URL has a password),
    # `smtps://...` (TLS from the start) or `smtp+insecure://...` (a password in clear when the
    # server offers no STARTTLS: said explicitly); see mail/transports.py. Without it each
    # message is written as an .eml file under DATA_DIR/mail/ and the log says where.
    smtp_url: SecretStr | None = None
    mail_from: str | None = None  # e.g. `Buildbay <builds@example.com>`
    signup: SignupMode = SignupMode.OPEN
    # The outbox (jobs/): how often a worker looks for due jobs when nothing woke it, how long a
    # claimed job stays its worker's before another may take it (a worker that died), and the
    # first wait before a retry (doubled at each attempt, with jitter).
    job_poll_seconds: Annotated[float, Field(gt=0)] = 5.0
    job_lease_seconds: Annotated[float, Field(gt=0)] = 120.0
    job_retry_base_seconds: Annotated[float, Field(gt=0)] = 10.0
    # Webhooks (webhooks/): endpoints must be https:// unless WEBHOOK_ALLOW_HTTP, and must not
    # reach private, loopback, link-local or metadata addresses (checked on the address
    # connected to) unless WEBHOOK_ALLOW_PRIVATE (tests, closed networks).
    webhook_allow_http: bool = False
    # Trusted publishing (publishers/): exchanges of CI ID tokens per client IP in a moving
    # minute, and how long an issuer's keys (JWKS) are kept before they are read again.
    oidc_exchanges_per_minute_per_ip: PositiveInt = 30
    trusted_publisher_keys_ttl_seconds: PositiveInt = 3600
    webhook_allow_private: bool = False
    # iOS device enrollment (devices/): the profile service's .mobileconfig is signed (CMS)
    # with this certificate and key when both are set, so that iOS shows it as Verified, and
    # handed out unsigned otherwise. Paths of PEM files: the certificate file may hold its chain
    # after it (a Let's Encrypt `fullchain.pem`); the key is not encrypted (`privkey.pem`).
    profile_signing_cert: Path | None = None
    profile_signing_key: Path | None = None
    # App Store Connect (devices/apple.py): where a project's devices are registered with
    # Apple (`POST {APPLE_API_URL}/v1/devices`), and how long one of its answers may take.
    apple_api_url: str = "https://api.appstoreconnect.apple.com"
    apple_api_timeout_seconds: Annotated[float, Field(gt=0)] = 15.0
    # Sign-in with the company's identity provider (OpenID Connect, docs/sso.md): on when
    # OIDC_ISSUER is set. The provider is found at `{issuer}/.well-known/openid-configuration`.
    oidc_issuer: str | None = None
    oidc_client_id: str | None = None
    oidc_client_secret: SecretStr | None = None
    oidc_scopes: str = "openid email profile"
    # E-mail domains that may sign in through the provider, comma-separated (empty: any);
    # compared after NFKC and IDNA, as join links' domains are.
    oidc_allowed_domains: str = ""
    # Password sign-in, sign-up and reset off for everyone but the OIDC_BREAK_GLASS e-mails
    # (comma-separated): the operator accounts that must get in when the provider is down.
    oidc_only: bool = False
    oidc_break_glass: str = ""
    # The ID token claim that lists the person's groups (e.g. `groups`), for the projects'
    # group-to-role mappings; empty: no mapping is applied.
    oidc_groups_claim: str | None = None
    # The button's "Sign in with <name>"; empty: the issuer's host name.
    oidc_provider_name: str | None = None

    @model_validator(mode="after")
    def _s3_needs_a_bucket(self) -> Settings:
        if self.storage is StorageKind.S3 and not self.s3_bucket:
            raise ConfigurationError("BUILDBAY_STORAGE=s3 needs BUILDBAY_S3_BUCKET")
        return self

    @model_validator(mode="after")
    def _smtp_url_is_smtp(self) -> Settings:
        if self.smtp_url is not None:
            url = urlsplit(self.smtp_url.get_secret_value())
            if url.scheme not in ("smtp", "smtps", "smtp+insecure") or not url.hostname:
                raise ConfigurationError(
                    "BUILDBAY_SMTP_URL must look like smtp://user:password@host:587 "
                    "(STARTTLS, required with a password), smtps://user:password@host:465 "
                    "(TLS) or smtp+insecure://user:password@host:25 (STARTTLS when offered, "
                    "else in clear)"
                )
        return self

    @field_validator("profile_signing_cert", "profile_signing_key", mode="before")
    @classmethod
    def _empty_path_is_unset(cls, value: object) -> object:
        return None if value == "" else value

    @model_validator(mode="after")
    def _profile_signing_works(self) -> Settings:
        """Both files set or neither, and they sign: refused at start, not at a tester's tap."""
        cert, key = self.profile_signing_cert, self.profile_signing_key
        if (cert is None) != (key is None):
            raise ConfigurationError(
                "Set both BUILDBAY_PROFILE_SIGNING_CERT and BUILDBAY_PROFILE_SIGNING_KEY (PEM "
                "files, e.g. the TLS certificate's fullchain.pem and privkey.pem), or neither"
            )
        if cert is not None and key is not None:
            try:
                ProfileSigner.load(cert, key)
            except SigningSetupError as exc:
                raise ConfigurationError(
                    f"BUILDBAY_PROFILE_SIGNING_CERT / BUILDBAY_PROFILE_SIGNING_KEY: {exc}"
                ) from None
        return self

    @field_validator("apple_api_url")
    @classmethod
    def _apple_api_url_is_https(cls, url: str) -> str:
        """https://, so that the token it is sent never crosses a network in clear; http://
        only to this machine (a test's receiver)."""
        parts = urlsplit(url)
        secure = parts.scheme == "https" or (
            parts.scheme == "http" and parts.hostname in ("127.0.0.1", "::1", "localhost")
        )
        if not parts.hostname or not secure:
            raise ConfigurationError(
                "BUILDBAY_APPLE_API_URL must be an https:// address, "
                "e.g. https://api.appstoreconnect.apple.com (http:// only to 127.0.0.1)"
            )
        return url.rstrip("/")

    @field_validator(
        "oidc_issuer", "oidc_client_id", "oidc_groups_claim", "oidc_provider_name", mode="before"
    )
    @classmethod
    def _empty_text_is_unset(cls, value: object) -> object:
        return None if isinstance(value, str) and not value.strip() else value

    @model_validator(mode="after")
    def _oidc_is_complete(self) -> Settings:
        """A provider that cannot work is refused at start, not at a person's first click."""
        issuer = self.oidc_issuer
        if issuer is None:
            if self.oidc_only:
                raise ConfigurationError(
                    "BUILDBAY_OIDC_ONLY=true needs BUILDBAY_OIDC_ISSUER (and its client): "
                    "without a provider nobody could sign in"
                )
            return self
        parts = urlsplit(issuer)
        loopback = parts.hostname in ("127.0.0.1", "::1", "localhost")
        secure = parts.scheme == "https" or (
            parts.scheme == "http" and (loopback or self.env is Environment.DEVELOPMENT)
        )
        if not parts.hostname or not secure or parts.query or parts.fragment:
            raise ConfigurationError(
                "BUILDBAY_OIDC_ISSUER must be the provider's https:// issuer URL, e.g. "
                "https://accounts.google.com or https://keycloak.example.com/realms/acme "
                "(http:// only in development or to this machine)"
            )
        if not self.oidc_client_id:
            raise ConfigurationError(
                "BUILDBAY_OIDC_ISSUER needs BUILDBAY_OIDC_CLIENT_ID (and, for a confidential "
                "client, BUILDBAY_OIDC_CLIENT_SECRET): the client registered at the provider"
            )
        if "openid" not in self.oidc_scopes.split():
            raise ConfigurationError("BUILDBAY_OIDC_SCOPES must include openid")
        for domain in _comma_list(self.oidc_allowed_domains):
            if not _is_domain(domain):
                raise ConfigurationError(
                    f"BUILDBAY_OIDC_ALLOWED_DOMAINS: {domain!r} is not a domain "
                    "(write them comma-separated, e.g. example.com,example.org)"
                )
        return self

    @property
    def oidc_enabled(self) -> bool:
        return self.oidc_issuer is not None

    @property
    def oidc_issuer_url(self) -> str:
        assert self.oidc_issuer is not None
        return self.oidc_issuer.rstrip("/")

    @property
    def oidc_button_name(self) -> str:
        """What "Sign in with ..." names: OIDC_PROVIDER_NAME, else the issuer's host."""
        if self.oidc_provider_name:
            return self.oidc_provider_name.strip()
        return urlsplit(self.oidc_issuer or "").hostname or "your identity provider"

    @property
    def oidc_allowed_domain_list(self) -> list[str]:
        return _comma_list(self.oidc_allowed_domains)

    @property
    def oidc_break_glass_list(self) -> list[str]:
        return _comma_list(self.oidc_break_glass)

    @field_validator("database_url")
    @classmethod
    def _database_url_names_a_driver(cls, url: str | None) -> str | None:
        """`postgres://`, `postgresql://` and `sqlite://`, as other tools write them, run on
        the drivers Buildbay has (asyncpg, its own inline SQLite); another driver is refused
        here rather than in a traceback at the first query."""
        if not url:
            return None  # set but empty, as an unset variable often arrives: the default
        scheme, separator, rest = url.partition("://")
        driver = DATABASE_DRIVERS.get(scheme.lower())
        if not separator or driver is None:
            raise ConfigurationError(
                "BUILDBAY_DATABASE_URL must be a PostgreSQL URL, e.g. "
                "postgresql://user:password@host:5432/buildbay, or an SQLite one, e.g. "
                "sqlite:////var/lib/buildbay/buildbay.sqlite3"
            )
        return f"{driver}://{rest}"

    @model_validator(mode="after")
    def _production_needs_a_real_secret(self) -> Settings:
        if self.env is Environment.PRODUCTION:
            key = self.secret_key.get_secret_value() if self.secret_key else ""
            if len(key) < MIN_SECRET_KEY_LENGTH or key.lower() in {"changeme", "secret"}:
                raise ConfigurationError(
                    "BUILDBAY_SECRET_KEY must be set in production to a random string of at least "
                    f"{MIN_SECRET_KEY_LENGTH} characters, e.g. the output of "
                    "`python3 -c 'import secrets; print(secrets.token_urlsafe(48))'`"
                )
        return self

    @cached_property
    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite+inline:///{(self.data_dir / 'buildbay.sqlite3').resolve()}"

    @property
    def resolved_public_url(self) -> str:
        if self.public_url:
            return self.public_url.rstrip("/")
        return f"http://{self.host}:{self.port}"

    @property
    def resolved_mail_from(self) -> str:
        """Who mails come from: MAIL_FROM, else an address at the public URL's host."""
        if self.mail_from:
            return self.mail_from
        host = urlsplit(self.resolved_public_url).hostname or ""
        if "." not in host or host.replace(".", "").isdigit():
            host = "localhost"  # an IP address or a bare name makes no mail domain
        return f"Buildbay <buildbay@{host}>"

    @cached_property
    def profile_signer(self) -> ProfileSigner | None:
        """What signs the device enrollment profile (devices/cms.py), if the settings say."""
        if self.profile_signing_cert is None or self.profile_signing_key is None:
            return None
        return ProfileSigner.load(self.profile_signing_cert, self.profile_signing_key)

    @property
    def mail_dir(self) -> Path:
        """Where mails go as .eml files when there is no SMTP server."""
        return self.data_dir / "mail"

    @property
    def migrates_itself(self) -> bool:
        """The embedded default migrates its own schema; production runs `buildbay db upgrade`."""
        return self.env is Environment.DEVELOPMENT and self.is_sqlite

    @property
    def storage_dir(self) -> Path:
        return self.data_dir / "builds"

    @cached_property
    def signing_key(self) -> bytes:
        """The secret behind tokens and signed URLs.

        In development without BUILDBAY_SECRET_KEY a random key is generated once and kept in the
        data directory, so tokens and upload links survive a restart.
        """
        if self.secret_key is not None:
            return self.secret_key.get_secret_value().encode()
        path = self.data_dir / SECRET_KEY_FILE
        self.data_dir.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            return path.read_text().strip().encode()
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_urlsafe(48))
        return path.read_text().strip().encode()

    def max_upload_bytes(self, plan: Plan) -> int:
        return {
            Plan.FREE: self.max_upload_bytes_free,
            Plan.PRO: self.max_upload_bytes_pro,
            Plan.ENTERPRISE: self.max_upload_bytes_enterprise,
        }[plan]

    def storage_quota(self, plan: Plan) -> int | None:
        """Bytes of builds a user of `plan` may keep; None means no limit."""
        quota = {
            Plan.FREE: self.quota_bytes_free,
            Plan.PRO: self.quota_bytes_pro,
            Plan.ENTERPRISE: self.quota_bytes_enterprise,
        }[plan]
        return quota or None

    def requests_per_minute(self, plan: Plan) -> int | None:
        """None means no limit."""
        return {
            Plan.FREE: self.rate_limit_free_per_minute,
            Plan.PRO: self.rate_limit_pro_per_minute,
            Plan.ENTERPRISE: None,
        }[plan]

    def invitations_per_day(self, account_plan: Plan, project_plan: Plan) -> InvitationCaps:
        """The day's caps on invitation mails for an account of `account_plan` inviting into a
        project of `project_plan`."""
        return InvitationCaps(
            per_recipient=self.invitations_per_recipient_per_day or None,
            per_account={
                Plan.FREE: self.invitations_per_account_per_day_free,
                Plan.PRO: self.invitations_per_account_per_day_pro,
                Plan.ENTERPRISE: self.invitations_per_account_per_day_enterprise,
            }[account_plan]
            or None,
            per_project={
                Plan.FREE: self.invitations_per_project_per_day_free,
                Plan.PRO: self.invitations_per_project_per_day_pro,
                Plan.ENTERPRISE: self.invitations_per_project_per_day_enterprise,
            }[project_plan]
            or None,
            per_unverified_account=self.invitations_per_account_per_day_unverified or None,
        )

    @property
    def is_sqlite(self) -> bool:
        return self.resolved_database_url.startswith("sqlite")


def _comma_list(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


def _is_domain(value: str) -> bool:
    label = value.strip().removeprefix("@").rstrip(".")
    return bool(label) and "@" not in label and "/" not in label and " " not in label

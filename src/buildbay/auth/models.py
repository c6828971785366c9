from __future__ import annotations

from datetime import datetime

from sqlalchemy import JSON, ForeignKey, Index, String, true
from sqlalchemy.orm import Mapped, mapped_column

from buildbay.auth.enums import TokenScope
from buildbay.config import Plan
from buildbay.db.base import Base, EnumString


class User(Base):
    __tablename__ = "users"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    email: Mapped[str] = mapped_column(String(320), unique=True)  # stored lower-cased
    name: Mapped[str] = mapped_column(String(100))
    password_hash: Mapped[str] = mapped_column(String(255))
    plan: Mapped[Plan] = mapped_column(EnumString(Plan), default=Plan.FREE)
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]
    # Mails about new builds of the applications they test (off by a one-click unsubscribe).
    notify_new_builds: Mapped[bool] = mapped_column(default=True, server_default=true())
    # When the account proved it receives mail at `email` (auth/verification.py): null until
    # then. Whoever signs up may type any address; this says whether it is theirs.
    email_verified_at: Mapped[datetime | None] = mapped_column(default=None)
    # Moves on when a password reset takes the account back. Each session and API token keeps
    # the epoch of the proof it was made from (the password read at login, the credential that
    # asked for a token), and one older than the user's never authenticates again: whatever a
    # request that began before the reset committed made is dead with the rest (issue 34).
    credentials_epoch: Mapped[int] = mapped_column(default=0, server_default="0")

    @property
    def email_verified(self) -> bool:
        return self.email_verified_at is not None


class Session(Base):
    """One login: the family every rotated refresh token and every access token of it belongs to.

    Revoking the row (logout, refresh-token reuse) revokes them all, on every process at once,
    because each request checks it.
    """

    __tablename__ = "sessions"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    created_at: Mapped[datetime]
    expires_at: Mapped[datetime]
    revoked_at: Mapped[datetime | None]
    # The user's `credentials_epoch` as the password read at login had it (see User).
    credentials_epoch: Mapped[int] = mapped_column(default=0, server_default="0")


class BrowserSession(Base):
    """The web console's cookie: a random token (stored hashed) for one login session. Logging
    out revokes the session row, and with it the cookie and every token of that login."""

    __tablename__ = "browser_sessions"

    token_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    session_id: Mapped[str] = mapped_column(
        ForeignKey("sessions.id", ondelete="CASCADE"), index=True
    )
    created_at: Mapped[datetime]


class RefreshToken(Base):
    __tablename__ = "refresh_tokens"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    session_id: Mapped[str] = mapped_column(
        ForeignKey("sessions.id", ondelete="CASCADE"), index=True
    )
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime]
    used_at: Mapped[datetime | None]


class ApiToken(Base):
    __tablename__ = "api_tokens"
    __table_args__ = (Index("ix_api_tokens_user_id_id", "user_id", "id"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(100))
    prefix: Mapped[str] = mapped_column(String(16))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime]
    expires_at: Mapped[datetime | None]
    last_used_at: Mapped[datetime | None]
    # Null: everything the user may do (but the account's endpoints).
    scope: Mapped[TokenScope | None] = mapped_column(EnumString(TokenScope))
    # Null: every project of the user; otherwise only these (ids of projects deleted since
    # stay, naming nothing).
    project_ids: Mapped[list[str] | None] = mapped_column(JSON)
    # The user's `credentials_epoch` as the login that made the token had it (see User).
    credentials_epoch: Mapped[int] = mapped_column(default=0, server_default="0")
    # A trusted publisher's exchanged token (publishers/): the one application it may reach,
    # the publisher it came from, and the CI identity ("<issuer> <subject>") that acts through
    # it. Null for the tokens people make; such a token is never listed among the account's.
    application_id: Mapped[str | None] = mapped_column(String(32), default=None)
    publisher_id: Mapped[str | None] = mapped_column(String(32), default=None, index=True)
    ci_identity: Mapped[str | None] = mapped_column(String(320), default=None)


class PasswordReset(Base):
    """A password-reset link: single use, an hour long, its token stored only as a hash."""

    __tablename__ = "password_resets"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime]
    expires_at: Mapped[datetime]
    used_at: Mapped[datetime | None]


class EmailChange(Base):
    """An address an account asked to move to, until the link mailed there is followed
    (auth/email_change.py): one per account, a new request replacing the last (whose link then
    stops working)."""

    __tablename__ = "email_changes"

    user_id: Mapped[str] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), primary_key=True
    )
    new_email: Mapped[str] = mapped_column(String(320))  # as normalise_email gives it
    requested_at: Mapped[datetime]


class SecretShownOnce(Base):
    """A secret the console shows once on the page a form redirects to (a new API token, a
    webhook's signing secret), never by answering the POST itself: a reload would send the form
    again. Kept split (console/shown_once.py): this row holds the secret XORed with a random pad
    of its length, the pad is in the browser's cookie; neither tells anything alone. The row is
    deleted when the page shows it, and with its login."""

    __tablename__ = "secrets_shown_once"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    session_id: Mapped[str] = mapped_column(
        ForeignKey("sessions.id", ondelete="CASCADE"), index=True
    )
    kind: Mapped[str] = mapped_column(String(16))  # "api_token" or "webhook"
    subject_id: Mapped[str] = mapped_column(String(32))  # the token's or the webhook's id
    sealed: Mapped[str] = mapped_column(String(512))  # hex
    created_at: Mapped[datetime] = mapped_column(index=True)


class CliSignIn(Base):
    """The command line signing in through the console (auth/cli_sign_in.py): a loopback
    redirect's one-time code (RFC 8252) or a device grant (RFC 8628), until it is exchanged for
    an API token, refused, or expired. Its secrets (the code or device code, the user code) are
    stored only as hashes; the sweeper forgets rows a day after they expired."""

    __tablename__ = "cli_sign_ins"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    kind: Mapped[str] = mapped_column(String(16))  # "loopback" or "device"
    # The loopback's one-time code, or the device code the command line polls with.
    secret_hash: Mapped[str] = mapped_column(String(64), unique=True)
    user_code_hash: Mapped[str | None] = mapped_column(String(64), unique=True)  # device only
    client_name: Mapped[str] = mapped_column(String(100))  # the computer, as the CLI named it
    redirect_uri: Mapped[str | None] = mapped_column(String(300))  # loopback only
    code_challenge: Mapped[str | None] = mapped_column(String(128))  # loopback: PKCE S256
    status: Mapped[str] = mapped_column(String(16))  # pending, approved, denied, used
    # Who approved, with their credentials' epoch then (a reset since leaves the token dead).
    user_id: Mapped[str | None] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), index=True
    )
    credentials_epoch: Mapped[int | None]
    created_at: Mapped[datetime]
    expires_at: Mapped[datetime] = mapped_column(index=True)
    polled_at: Mapped[datetime | None]  # device: the last poll (slow_down)
    interval_seconds: Mapped[int]  # device: the least time between polls

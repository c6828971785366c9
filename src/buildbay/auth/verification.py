"""E-mail verification: whether an account receives mail at its address.

Anyone may sign up with any address, so until the account proves it, the address is only what
was typed (issue 34: an attacker registered a newcomer's address before they arrived). Signing
up (the API's register, the console's sign-up) writes a verification mail to the outbox in the
same unit of work; following its link proves the address, as following a password-reset link
or accepting an invitation mailed to the address does (`mark_verified`). Nothing is refused to
an unverified account: admins are told, wherever they add or see members.

The link's token names the user and its expiry and carries an HMAC of the server's key over
them and the account's e-mail: no table, nothing to sweep, and a link made for an address the
account no longer has is worthless. Following it twice is harmless.

The mail goes to an address nobody has proven yet, so it carries nothing the sign-up typed
but the address itself: no name (it greets generically), since an attacker signing up with a
stranger's address would otherwise write to them in the server's own voice. A new mail may be
asked for a few times an hour, and at most VERIFICATION_MAILS_PER_ADDRESS_PER_DAY times a UTC
day per address, counted in the database's shared mail counters (invitations/counts.py) in
the same transaction as the mail."""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
from datetime import UTC, datetime, timedelta
from urllib.parse import urlencode

from limits import RateLimitItemPerHour
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.auth.models import User
from buildbay.auth.tokens import derive_key
from buildbay.constant_time import same_secret
from buildbay.errors import Conflict, RateLimited, ValidationFailed
from buildbay.ids import ID_PATTERN
from buildbay.invitations.counts import address_hash, seconds_to_next_day, spend_one
from buildbay.mail.message import render
from buildbay.mail.outbox import MailOutbox
from buildbay.ratelimit.limiter import RateLimiter

log = logging.getLogger("buildbay.auth")

VERIFY_PAGE = "/verify-email"
VERIFICATION_TOKEN_PREFIX = "bbv_"
LINK_LIFETIME = timedelta(days=7)
# A new mail asked for at most this often per account (the sign-up's own mail not counted).
RESENDS_PER_ACCOUNT = RateLimitItemPerHour(5)


def mark_verified(user: User, now: datetime) -> None:
    """The account proved it receives mail at its address (kept as of the first proof)."""
    if user.email_verified_at is None:
        user.email_verified_at = now
        user.updated_at = now


class VerificationLinks:
    """`PUBLIC_URL/verify-email?token=bbv_<user id>.<expiry>.<mac>`."""

    def __init__(self, master_key: bytes, public_url: str) -> None:
        self._key = derive_key(master_key, "email-verification")
        self._base = f"{public_url.rstrip('/')}{VERIFY_PAGE}"

    def _mac(self, user_id: str, email: str, expires: int) -> str:
        signed = f"{user_id}|{expires}|{email}".encode()
        digest = hmac.new(self._key, signed, hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest[:20]).rstrip(b"=").decode()

    def token(self, user: User, expires_at: datetime) -> str:
        expires = int(expires_at.timestamp())
        mac = self._mac(user.id, user.email, expires)
        return f"{VERIFICATION_TOKEN_PREFIX}{user.id}.{expires}.{mac}"

    def url(self, token: str) -> str:
        return f"{self._base}?{urlencode({'token': token})}"

    @staticmethod
    def user_of(token: str) -> str | None:
        """The user a token names (not yet checked: see `holds`)."""
        user_id, _, _ = token.removeprefix(VERIFICATION_TOKEN_PREFIX).partition(".")
        return user_id if ID_PATTERN.fullmatch(user_id) else None

    def holds(self, token: str, user: User, now: datetime) -> bool:
        """Whether this server made `token` for `user`'s present address and it is unexpired."""
        if not token.startswith(VERIFICATION_TOKEN_PREFIX):
            return False
        parts = token.removeprefix(VERIFICATION_TOKEN_PREFIX).split(".")
        if len(parts) != 3 or parts[0] != user.id or not _is_seconds(parts[1]):
            return False
        expires = int(parts[1])
        mac = self._mac(user.id, user.email, expires)
        return same_secret(parts[2], mac) and datetime.fromtimestamp(expires, UTC) > now


def _is_seconds(text: str) -> bool:
    return 0 < len(text) <= 12 and text.isascii() and text.isdigit()


def invalid_link() -> ValidationFailed:
    return ValidationFailed.for_field(
        "token",
        "this verification link is unknown or expired; sign in and ask for a new one",
        code="invalid_token",
    )


class EmailVerifications:
    def __init__(
        self, db: AsyncSession, now: datetime, links: VerificationLinks, mail: MailOutbox,
        resends_per_day: int = 3,
    ) -> None:  # fmt: skip
        self.db = db
        self.now = now
        self.links = links
        self.mail = mail
        self.resends_per_day = resends_per_day

    def send(self, user: User) -> bool:
        """Write the verification mail of `user` to the outbox (in the caller's unit of work).
        False if no mail can be made for the address (the standard library refuses some that
        the sign-up took): the sign-up goes on, unverified, and this is logged."""
        link = self.links.url(self.links.token(user, self.now + LINK_LIFETIME))
        mail = render(
            "email_verification",
            user.email,
            "Confirm your e-mail address for Buildbay",
            email=user.email,
            link=link,
            days=LINK_LIFETIME.days,
        )
        try:
            self.mail.send(self.db, mail, self.now)
        except ValueError as exc:  # email.errors' header defects are ValueErrors
            log.warning("no verification mail for user %s: %s", user.id, type(exc).__name__)
            return False
        return True

    async def resend(self, user_id: str, limiter: RateLimiter) -> None:
        """Mail the link again to the account's address: 409 if it is verified already, 429
        past RESENDS_PER_ACCOUNT or past the address's mails of the day."""
        user = await self.db.get_one(User, user_id)
        if user.email_verified:
            raise Conflict("Your e-mail address is verified already", code="email_already_verified")
        wait = await limiter.throttle("email-verification", user.id, RESENDS_PER_ACCOUNT)
        if wait is not None:
            raise RateLimited(
                "Too many verification mails asked for; wait before asking again",
                code="verification_throttled",
                headers={"Retry-After": str(wait)},
            )
        key = f"verification:{address_hash(user.email)}"
        if not await spend_one(self.db, self.now, key, self.resends_per_day):
            raise RateLimited(
                f"This address has been sent as many verification mails as it takes in a day "
                f"({self.resends_per_day}); use the link of one of them, or ask again tomorrow",
                code="verification_throttled",
                headers={"Retry-After": str(seconds_to_next_day(self.now))},
            )
        if not self.send(user):
            raise ValidationFailed.for_field(
                "email",
                "a mail cannot be sent to this address from this server",
                code="email_not_mailable",
            )

    async def confirm(self, token: str) -> User:
        """Follow a link: its account's address is verified. 422 `invalid_token` for a link
        this server did not make, one for an address the account no longer has, or an expired
        one."""
        user_id = self.links.user_of(token)
        user = await self.db.get(User, user_id) if user_id is not None else None
        if user is None or not self.links.holds(token, user, self.now):
            raise invalid_link()
        mark_verified(user, self.now)
        await self.db.flush()
        return user

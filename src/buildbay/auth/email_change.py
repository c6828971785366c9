"""Changing an account's e-mail address: asked for with the password, done when the link mailed
to the new address is followed (issue 36).

The address is the account's name for logins, invitations and password resets, so it moves only
once the new mailbox has proven it is reachable and the account holder's: asking needs the
current password (counted against the same failure budget as logins, so a stolen session gives
no faster way to guess it) and writes the new address to `email_changes` (one per account: a new
request replaces the last, whose link then stops working) and a mail to the new address to the
outbox, in the same unit of work. Following the link moves the address, verified (the link
proved the mailbox), spends the password-reset links and revokes the personal install links
mailed to the old address, and mails the old address that it happened, so a change nobody meant
is noticed.

The link's token names the user and its expiry and carries an HMAC of the server's key over
them, the account's present address and password hash, the address asked for and when it was
asked: no secret is stored, and a link is worthless once the account's address, its password or
its pending change is another. Taking the account back (a password reset, a change of password)
thus spends a change asked for with the old password, and drops it (`drop_pending_change`):
otherwise whoever learnt the password could ask to move the account to their own mailbox, wait
for the reset, then follow the link and reset it again from there.
Mails to a new address are capped per address and UTC day (the verification mails' cap,
`verification_mails_per_address_per_day`, counted apart) and a few an hour per account."""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
from datetime import UTC, datetime, timedelta
from urllib.parse import urlencode

from limits import RateLimitItemPerHour
from sqlalchemy import delete, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.auth.logins import (
    normalise_email,
    password_guess_keys,
    password_is_right,
    user_by_email,
)
from buildbay.auth.models import EmailChange, PasswordReset, User
from buildbay.auth.tokens import derive_key
from buildbay.builds.models import InstallLink
from buildbay.constant_time import same_secret
from buildbay.distribution.models import BuildRecipient
from buildbay.errors import Conflict, RateLimited, ValidationFailed
from buildbay.ids import ID_PATTERN
from buildbay.invitations.counts import address_hash, seconds_to_next_day, spend_one
from buildbay.mail.message import render
from buildbay.mail.outbox import MailOutbox
from buildbay.ratelimit.limiter import RateLimiter

log = logging.getLogger("buildbay.auth")

CHANGE_PAGE = "/confirm-email"
CHANGE_TOKEN_PREFIX = "bbc_"
LINK_LIFETIME = timedelta(days=2)
REQUESTS_PER_ACCOUNT = RateLimitItemPerHour(5)


def _taken() -> Conflict:
    return Conflict("An account with this e-mail already exists", code="email_taken")


def invalid_change_link() -> ValidationFailed:
    return ValidationFailed.for_field(
        "token",
        "this link is unknown, expired, or for a change asked for since; sign in and ask again",
        code="invalid_token",
    )


class EmailChangeLinks:
    """`PUBLIC_URL/confirm-email?token=bbc_<user id>.<expiry>.<mac>`."""

    def __init__(self, master_key: bytes, public_url: str) -> None:
        self._key = derive_key(master_key, "email-change")
        self._base = f"{public_url.rstrip('/')}{CHANGE_PAGE}"

    def _mac(self, user: User, change: EmailChange, expires: int) -> str:
        asked = change.requested_at.astimezone(UTC).isoformat()
        signed = (
            f"{user.id}|{expires}|{user.email}|{change.new_email}|{asked}|{user.password_hash}"
        ).encode()
        digest = hmac.new(self._key, signed, hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest[:20]).rstrip(b"=").decode()

    def url(self, user: User, change: EmailChange, expires_at: datetime) -> str:
        expires = int(expires_at.timestamp())
        token = f"{CHANGE_TOKEN_PREFIX}{user.id}.{expires}.{self._mac(user, change, expires)}"
        return f"{self._base}?{urlencode({'token': token})}"

    @staticmethod
    def user_of(token: str) -> str | None:
        """The user a token names (not yet checked: see `holds`)."""
        if not token.startswith(CHANGE_TOKEN_PREFIX):
            return None
        user_id = token.removeprefix(CHANGE_TOKEN_PREFIX).partition(".")[0]
        return user_id if ID_PATTERN.fullmatch(user_id) else None

    def holds(self, token: str, user: User, change: EmailChange, now: datetime) -> bool:
        """Whether this server made `token` for the user's present address and pending change,
        and it is unexpired."""
        parts = token.removeprefix(CHANGE_TOKEN_PREFIX).split(".")
        if len(parts) != 3 or parts[0] != user.id or not _is_seconds(parts[1]):
            return False
        expires = int(parts[1])
        mac = self._mac(user, change, expires)
        return same_secret(parts[2], mac) and datetime.fromtimestamp(expires, UTC) > now


async def drop_pending_change(db: AsyncSession, user_id: str) -> None:
    """Forget the account's pending change of address (its password changed: the link no longer
    holds, and the account page no longer shows it as pending)."""
    await db.execute(delete(EmailChange).where(EmailChange.user_id == user_id))


def _is_seconds(text: str) -> bool:
    return 0 < len(text) <= 12 and text.isascii() and text.isdigit()


class EmailChanges:
    def __init__(
        self, db: AsyncSession, now: datetime, links: EmailChangeLinks, mail: MailOutbox,
        mails_per_day: int = 3,
    ) -> None:  # fmt: skip
        self.db = db
        self.now = now
        self.links = links
        self.mail = mail
        self.mails_per_day = mails_per_day

    async def request(
        self, user_id: str, new_email: str, password: str, client_ip: str, limiter: RateLimiter
    ) -> EmailChange:
        """Ask to move the account to `new_email`: a mail with the link goes there. 422 for a
        wrong password (`wrong_password`) or the present address (`same_email`), 409 if another
        account has it, 429 past the account's or the address's mails."""
        user = await self.db.get_one(User, user_id)
        if not await password_is_right(
            limiter, password_guess_keys(user.email, client_ip), "Too many wrong passwords",
            password, user.password_hash,
        ):  # fmt: skip
            raise ValidationFailed.for_field(
                "password", "is not your current password", code="wrong_password"
            )
        new_email = normalise_email(new_email)
        if new_email == user.email:
            raise ValidationFailed.for_field(
                "newEmail", "is your address already", code="same_email"
            )
        if await user_by_email(self.db, new_email) is not None:
            raise _taken()
        wait = await limiter.throttle("email-change", user.id, REQUESTS_PER_ACCOUNT)
        if wait is not None:
            raise RateLimited(
                "Too many e-mail changes asked for; wait before asking again",
                code="email_change_throttled",
                headers={"Retry-After": str(wait)},
            )
        if not await spend_one(
            self.db, self.now, f"email-change:{address_hash(new_email)}", self.mails_per_day
        ):
            raise RateLimited(
                f"This address has been sent as many confirmation mails as it takes in a day "
                f"({self.mails_per_day}); use the link of one of them, or ask again tomorrow",
                code="email_change_throttled",
                headers={"Retry-After": str(seconds_to_next_day(self.now))},
            )
        change = await self.db.get(EmailChange, user.id)
        if change is None:
            change = EmailChange(user_id=user.id, new_email=new_email, requested_at=self.now)
            self.db.add(change)
        else:  # the last request's link stops working
            change.new_email, change.requested_at = new_email, self.now
        await self.db.flush()
        link = self.links.url(user, change, self.now + LINK_LIFETIME)
        mail = render(
            # Nothing the account typed but the address itself (no name): the mail goes to a
            # mailbox nobody has proven yet (as auth/verification.py's).
            "email_change", new_email, "Confirm your new e-mail address for Buildbay",
            new_email=new_email, link=link, days=LINK_LIFETIME.days,
        )  # fmt: skip
        try:
            self.mail.send(self.db, mail, self.now)
        except ValueError:  # email.errors' header defects are ValueErrors
            raise ValidationFailed.for_field(
                "newEmail",
                "cannot be sent a mail from this server",
                code="email_not_mailable",
            ) from None
        return change

    async def confirm(self, token: str) -> User:
        """Follow a link: the account's address becomes the one asked for, verified, and the
        old address is told. 422 `invalid_token` for a link this server did not make, an
        expired one, or one for a change asked for since; 409 if another account took the
        address meanwhile."""
        user_id = self.links.user_of(token)
        user = await self.db.get(User, user_id) if user_id is not None else None
        change = await self.db.get(EmailChange, user_id) if user is not None else None
        if user is None or change is None or not self.links.holds(token, user, change, self.now):
            raise invalid_change_link()
        if await user_by_email(self.db, change.new_email) is not None:
            raise _taken()
        old_email = user.email
        user.email = change.new_email
        user.email_verified_at = self.now  # the link proved the new mailbox
        user.updated_at = self.now
        await self.db.delete(change)
        try:
            await self.db.flush()
        except IntegrityError:  # an account took the address a moment ago
            raise _taken() from None
        # The links mailed to the old address stop working: whoever reads that mailbox now (one
        # its holder left for a reason) can neither take the account with a reset link nor
        # install builds as its holder with a new-build mail's personal install link (what is
        # done through one counts as its person's). The console makes them new ones.
        await self.db.execute(
            update(PasswordReset)
            .where(PasswordReset.user_id == user.id, PasswordReset.used_at.is_(None))
            .values(used_at=self.now)
        )
        mailed = select(BuildRecipient.install_link_id).where(
            BuildRecipient.user_id == user.id,
            BuildRecipient.email == old_email,
            BuildRecipient.install_link_id.is_not(None),
        )
        await self.db.execute(
            update(InstallLink)
            .where(InstallLink.id.in_(mailed), InstallLink.revoked_at.is_(None))
            .values(revoked_at=self.now)
            .execution_options(synchronize_session=False)
        )
        told = render(
            "email_changed", old_email, "The e-mail address of your Buildbay account changed",
            name=user.name, old_email=old_email, new_email=user.email,
        )  # fmt: skip
        try:
            self.mail.send(self.db, told, self.now)
        except ValueError as exc:  # the old address took mail before; logged, not refused
            log.warning("no address-change notice for user %s: %s", user.id, type(exc).__name__)
        return user

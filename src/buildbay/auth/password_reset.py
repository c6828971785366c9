"""Password reset by e-mail.

Asking (`request`) answers the same whether or not an account has the e-mail, and does the same
work: it writes one job. The job's handler, in the worker, looks the account up and, if there is
one, makes the link and writes its mail, both in the job's own unit of work (so the link and its
mail exist together, once). The link's token is single use, lasts an hour, and is stored as a
hash; using it sets the password, ends every session of the user (refresh-token families,
access tokens, the console's cookies) and deletes every API token of the account, and proves
the address (the link came by mail to it). A reset thus takes the account back from whoever
had it: someone who signed up with another person's address before they arrived, or who
learnt the password (issue 34). Asking is throttled per e-mail and per client IP."""

from __future__ import annotations

import secrets
from datetime import datetime, timedelta
from enum import StrEnum
from urllib.parse import urlencode

from limits import RateLimitItemPerHour
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.audit.record import Actor, AuditAction
from buildbay.auth import passwords
from buildbay.auth.accounts import AccountService
from buildbay.auth.logins import normalise_email
from buildbay.auth.models import PasswordReset, User
from buildbay.auth.tokens import hash_token
from buildbay.auth.verification import mark_verified
from buildbay.clock import Clock
from buildbay.errors import RateLimited, ValidationFailed
from buildbay.ids import new_id
from buildbay.jobs.queue import enqueue
from buildbay.jobs.worker import Handler, JobFailed, JobRun
from buildbay.mail.headers import UnmailableAddress
from buildbay.mail.message import render
from buildbay.mail.outbox import MailOutbox
from buildbay.ratelimit.limiter import RateLimiter
from buildbay.sso.policy import PASSWORDS_ALLOWED, PasswordPolicy

PASSWORD_RESET_JOB = "password_reset"
RESET_LIFETIME = timedelta(hours=1)
RESET_TOKEN_PREFIX = "bbp_"
RESET_PAGE = "/reset-password"
# SSO-only, said to every address alike (sso/policy.py `refusal`).
BREAK_GLASS_RESET_NOTE = ". An operator's break-glass account is mailed its link all the same"
# Asked for at most this often: per e-mail (a mailbox is not flooded) and per client IP.
PER_EMAIL = RateLimitItemPerHour(5)
PER_IP = RateLimitItemPerHour(20)


class ResetLinkState(StrEnum):
    USABLE = "usable"
    USED = "used"  # this link, or another of the account's, set the password since
    EXPIRED = "expired"
    UNKNOWN = "unknown"  # never sent, or cut short or mistyped


class PasswordResets:
    def __init__(
        self, db: AsyncSession, now: datetime, passwords: PasswordPolicy = PASSWORDS_ALLOWED
    ) -> None:
        """`passwords`: who may still use a password (sso/policy.py: BUILDBAY_OIDC_ONLY)."""
        self.db = db
        self.now = now
        self.passwords = passwords

    async def request(self, email: str, client_ip: str, limiter: RateLimiter) -> None:
        """Ask for a link to be mailed to `email`, if an account has it (which the caller is
        never told)."""
        email = normalise_email(email)
        for namespace, key, item in (
            ("password-reset-ip", client_ip, PER_IP),
            ("password-reset-email", email, PER_EMAIL),
        ):
            if (wait := await limiter.throttle(namespace, key, item)) is not None:
                raise RateLimited(
                    "Too many password resets asked for; wait before asking again",
                    code="reset_throttled",
                    headers={"Retry-After": str(wait)},
                )
        # SSO-only: a link is mailed to a break-glass address only (a link already issued, or
        # one the operator's `buildbay users` command gave, still sets a password; signing in
        # with it stays off but for break-glass), and every address is answered the same 403,
        # after the same throttles: which addresses are break-glass is never told.
        if self.passwords.may_use_password(email):
            enqueue(self.db, PASSWORD_RESET_JOB, {"email": email}, self.now)
        if self.passwords.sso_only:
            raise self.passwords.refusal("Password reset", note=BREAK_GLASS_RESET_NOTE,
                                         keeps_writes=True)  # fmt: skip

    async def issue(self, user: User) -> str:
        """A new link's token for `user` (its hash stored)."""
        token = RESET_TOKEN_PREFIX + secrets.token_urlsafe(32)
        self.db.add(
            PasswordReset(
                id=new_id("prs"),
                user_id=user.id,
                token_hash=hash_token(token),
                created_at=self.now,
                expires_at=self.now + RESET_LIFETIME,
                used_at=None,
            )
        )
        await self.db.flush()
        return token

    async def link_state(self, token: str) -> ResetLinkState:
        """What a link is now, for its page to say before it asks for a password (the use
        itself is `confirm`'s claim, which decides)."""
        row = (
            await self.db.execute(
                select(PasswordReset.used_at, PasswordReset.expires_at).where(
                    PasswordReset.token_hash == hash_token(token)
                )
            )
        ).one_or_none()
        if row is None:
            return ResetLinkState.UNKNOWN
        if row.used_at is not None:
            return ResetLinkState.USED
        if row.expires_at <= self.now:
            return ResetLinkState.EXPIRED
        return ResetLinkState.USABLE

    async def confirm(self, token: str, password: str, accounts: AccountService) -> User:
        """Set the password of the link's user, end all their sessions and delete all their API
        tokens; 422 `invalid_token` for a link that is unknown, used or expired."""
        user_id = await self.db.scalar(
            # The claim decides: of two uses at once, one wins.
            update(PasswordReset)
            .where(
                PasswordReset.token_hash == hash_token(token),
                PasswordReset.used_at.is_(None),
                PasswordReset.expires_at > self.now,
            )
            .values(used_at=self.now)
            .returning(PasswordReset.user_id)
        )
        if user_id is None:
            raise ValidationFailed.for_field(
                "token",
                "this link is unknown, used or expired; ask for a new one",
                code="invalid_token",
            )
        user = await self.db.get_one(User, user_id)
        await self.take_back(user, await passwords.hash_password(password), accounts)
        # By whoever holds the link: the mailbox's owner, as far as the server can tell.
        accounts.record_about(user, Actor.of(user), AuditAction.PASSWORD_RESET)
        return user

    async def take_back(self, user: User, password_hash: str, accounts: AccountService) -> None:
        """Give the account to whoever proved they receive mail at its address (a reset link
        followed, or the identity provider's verified address: sso/signin.py): `password_hash`
        replaces the password, the address is proven, the user's other reset links are spent
        (one proof, one password), and every credential made before ends (sessions, refresh
        and access tokens, console cookies, API tokens: `end_every_credential`). The caller
        records why."""
        user.password_hash = password_hash
        user.updated_at = self.now
        mark_verified(user, self.now)
        await self.db.execute(
            update(PasswordReset)
            .where(PasswordReset.user_id == user.id, PasswordReset.used_at.is_(None))
            .values(used_at=self.now)
        )
        await accounts.end_every_credential(user.id)
        # The epoch moved on in the database: a login made next (the provider's sign-in) is
        # made at the new one, so that it lives.
        await self.db.refresh(user, ["credentials_epoch"])


def reset_link(public_url: str, token: str) -> str:
    return f"{public_url}{RESET_PAGE}?{urlencode({'token': token})}"


def password_reset_handler(clock: Clock, public_url: str, outbox: MailOutbox) -> Handler:
    """The worker's side of `request`: the link and its mail, if an account has the e-mail."""

    async def handle(run: JobRun) -> None:
        now = clock.now()
        user = await run.db.scalar(select(User).where(User.email == run.payload["email"]))
        if user is None:
            return  # nobody to tell; the caller was answered the same
        token = await PasswordResets(run.db, now).issue(user)
        message = render(
            "password_reset",
            user.email,
            "Reset your Buildbay password",
            # The name only once the address is proven: whoever signed up with a stranger's
            # address chose it, and anyone may ask for this mail to be sent.
            name=user.name if user.email_verified else "",
            email=user.email,
            link=reset_link(public_url, token),
        )
        try:
            outbox.send(run.db, message, now)
        except UnmailableAddress as exc:  # stored before today's rules: no retry mends it
            raise JobFailed(f"the reset link cannot be mailed: {exc.detail}") from None

    return handle

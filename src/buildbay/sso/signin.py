"""What a sign-in through the identity provider decides, once its ID token is validated
(sso/provider.py): whose account it is, made or linked at the first sign-in; the projects the
person's groups give them (sso/groups.py); a new login; the audit log's entries.

The rules, in order:
- The provider's person is `(iss, sub)`, which OpenID Connect promises never changes: once
  linked, it finds its account whatever its e-mail becomes.
- BUILDBAY_OIDC_ALLOWED_DOMAINS: the address the provider gives, verified by it, must be of one
  of them, at every sign-in (a person moved out of the company's domain is out).
- A first sign-in needs an address the provider says is verified (`email_verified`: true).
  - No account has it: one is made (as BUILDBAY_SIGNUP allows: invite-only needs an invitation,
    closed needs the operator), its address verified, with no password.
  - An account has it: the sign-in is linked to it. If that account never proved the address
    here (`email_verified_at`), it may be a squatter's (anyone can sign up with any address):
    the provider's verified address proves the mailbox as a password reset's link does, so it
    is decided as a reset decides, through the reset's own code (`PasswordResets.take_back`):
    every credential of the account ends (sessions, refresh tokens, API tokens; its password
    too), the address is marked verified, and the audit log says so
    (`auth.account_taken_back`). With BUILDBAY_OIDC_ONLY this is the owner's only way in.
  - An account already linked to another person of the same provider (an address recycled at
    the company) is not linked to a second one.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import BaseModel
from pydantic import ValidationError as ModelError
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.audit.record import Actor, ActorKind, AuditAction, Origin, Target, record
from buildbay.auth.accounts import AccountService
from buildbay.auth.logins import IssuedTokens, LoginService, normalise_email, user_by_email
from buildbay.auth.models import User
from buildbay.auth.password_reset import PasswordResets
from buildbay.auth.passwords import NO_PASSWORD
from buildbay.config import Plan, SignupMode
from buildbay.db.reads import Reads
from buildbay.ids import new_id
from buildbay.invitations.reads import invited
from buildbay.schemas import Email, Name
from buildbay.sso.groups import apply_group_mappings, groups_of
from buildbay.sso.models import SsoIdentity
from buildbay.sso.provider import SignInFailed, SsoConfig
from buildbay.text import NAME_MAX


class _Claimed(BaseModel):
    """What the provider says of the person, held to the rules a sign-up's fields meet."""

    email: Email


class _ClaimedName(BaseModel):
    name: Name


@dataclass(frozen=True, slots=True)
class SignedIn:
    user: User
    tokens: IssuedTokens
    created: bool  # the account was made by this sign-in
    linked: bool  # an existing account was linked to the provider by this sign-in
    invited: bool  # a project invitation for the address waits


class SsoSignIns:
    """Sign-ins through the provider, in the request's unit of work."""

    def __init__(
        self,
        db: AsyncSession,
        now: datetime,
        config: SsoConfig,
        logins: LoginService,
        signup: SignupMode,
        origin: Origin,
    ) -> None:
        self.db = db
        self.now = now
        self.config = config
        self.logins = logins
        self.signup = signup
        self.origin = origin

    async def sign_in(self, claims: dict[str, Any]) -> SignedIn:
        subject = claims.get("sub")
        if not isinstance(subject, str) or not 0 < len(subject) <= 255:
            raise SignInFailed(self._says("sent no usable subject"), "invalid_subject")
        email, verified = self._email_of(claims)
        if self.config.allowed_domains and not (
            email is not None and verified and self.config.domain_allowed(email)
        ):
            raise SignInFailed(
                "Only addresses of "
                + ", ".join(sorted(self.config.allowed_domains))
                + f" may sign in here, and {self.config.name} did not give a verified one of "
                "them. Sign in with your company account.",
                "domain_not_allowed",
            )
        identity = await self.db.get(SsoIdentity, (self.config.issuer, subject))
        created = linked = False
        if identity is not None:
            user = await self.db.get_one(User, identity.user_id)
            identity.last_sign_in_at = self.now
        else:
            if email is None or not verified:
                raise SignInFailed(
                    f"{self.config.name} does not say that the e-mail address of this account "
                    "is verified, so no Buildbay account can be made or linked with it. Verify "
                    f"the address at {self.config.name}, then sign in again.",
                    "email_unverified",
                )
            existing = await user_by_email(self.db, email)
            if existing is None:
                user = await self._new_account(email, claims.get("name"))
                created = True
            else:
                await self._may_link(existing)
                if not existing.email_verified:
                    await self._take_back(existing)
                user, linked = existing, True
            self.db.add(
                SsoIdentity(
                    issuer=self.config.issuer,
                    subject=subject,
                    user_id=user.id,
                    email=email,
                    created_at=self.now,
                    last_sign_in_at=self.now,
                )
            )
            try:
                await self.db.flush()
            except IntegrityError:  # the same first sign-in, twice at once
                raise SignInFailed(
                    "Another sign-in of this account was happening at the same moment. Sign "
                    "in again.",
                    "concurrent_sign_in",
                ) from None
        if self.config.groups_claim:
            groups = groups_of(claims, self.config.groups_claim)
            if groups is not None:
                await apply_group_mappings(self.db, self.now, user, groups, self.origin)
        tokens = await self.logins.start_session(user, user.credentials_epoch)
        record(
            self.db,
            at=self.now,
            actor=Actor.user(user.id, user.email),
            action=AuditAction.SIGN_IN,
            target=Target("user", user.id, user.email),
            origin=self.origin,
            subject_user_id=user.id,
            details={"method": "sso", "created": created, "linked": linked},
        )
        waiting = await invited(Reads.within(self.db), user.email, self.now)
        return SignedIn(user, tokens, created, linked, waiting)

    def record_failure(self, failed: SignInFailed, claims: dict[str, Any] | None) -> None:
        """The audit log's entry for a refused sign-in (in this unit of work, which the caller
        commits: the refusal is an answer, not an error)."""
        email = None
        if claims is not None:
            email, _ = self._email_of(claims)
        details: dict[str, Any] = {"method": "sso", "reason": failed.code}
        if failed.why:
            details["why"] = failed.why
        record(
            self.db,
            at=self.now,
            actor=Actor(ActorKind.USER, None, email),
            action=AuditAction.SIGN_IN_FAILED,
            target=None,
            origin=self.origin,
            details=details,
        )

    def _email_of(self, claims: dict[str, Any]) -> tuple[str | None, bool]:
        """The provider's address of the person (normalised; None if it gives none that a
        sign-up would take) and whether it says the address is verified."""
        given = claims.get("email")
        if not isinstance(given, str):
            return None, False
        try:
            email = normalise_email(str(_Claimed(email=given).email))
        except ModelError:
            return None, False
        # Some providers send the boolean as a string.
        verified = claims.get("email_verified") in (True, "true")
        return email, verified

    async def _new_account(self, email: str, claimed_name: object) -> User:
        if self.signup is SignupMode.CLOSED:
            raise SignInFailed(
                "This server makes no new accounts: ask its operator for one, then sign in "
                f"with {self.config.name}.",
                "signup_closed",
            )
        if self.signup is SignupMode.INVITE_ONLY and not await invited(
            Reads.within(self.db), email, self.now
        ):
            raise SignInFailed(
                "An account is made here only for an invited address: ask an admin of your "
                f"project to invite {email}, then sign in with {self.config.name} again.",
                "invitation_required",
            )
        user = User(
            id=new_id("usr"),
            email=email,
            name=_name(claimed_name) or email.split("@", 1)[0][:NAME_MAX],
            password_hash=NO_PASSWORD,
            plan=Plan.FREE,
            created_at=self.now,
            updated_at=self.now,
            email_verified_at=self.now,  # the provider verified it
            credentials_epoch=0,
        )
        self.db.add(user)
        try:
            await self.db.flush()
        except IntegrityError:  # the address signed up a moment ago
            raise SignInFailed(
                "An account with this address was made at the same moment. Sign in again.",
                "concurrent_sign_in",
            ) from None
        return user

    async def _take_back(self, user: User) -> None:
        """The provider's verified address proves the mailbox as a reset link does: the account
        is its owner's now, and whatever was made of it before (by a squatter, who may have
        signed up with the address first) ends as a reset ends it, the password with it."""
        accounts = AccountService(self.db, self.now, self.logins)
        await PasswordResets(self.db, self.now).take_back(user, NO_PASSWORD, accounts)
        accounts.record_about(
            user, Actor.of(user), AuditAction.ACCOUNT_TAKEN_BACK,
            method="sso", provider=self.config.name,
        )  # fmt: skip

    async def _may_link(self, user: User) -> None:
        other = await self.db.scalar(
            select(SsoIdentity.subject).where(
                SsoIdentity.user_id == user.id, SsoIdentity.issuer == self.config.issuer
            )
        )
        if other is not None:
            raise SignInFailed(
                f"The account of {user.email} here belongs to another {self.config.name} "
                "account. Ask the operator of this server.",
                "linked_to_another",
            )

    def _says(self, what: str) -> str:
        return f"{self.config.name} {what}, so you are not signed in. Try again."


def _name(claimed: object) -> str | None:
    if not isinstance(claimed, str):
        return None
    try:
        return _ClaimedName(name=claimed.strip()).name
    except ModelError:
        return None

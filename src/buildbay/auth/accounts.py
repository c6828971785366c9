"""Accounts: signing up, the profile, the password, and the API tokens of an account; taking an
account back (a password reset ends every credential of it). Its logins are auth/logins.py's."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.audit.record import Actor, AuditAction, HasIdAndEmail, Target, record
from buildbay.auth import passwords
from buildbay.auth.authentication import Principal
from buildbay.auth.email_change import drop_pending_change
from buildbay.auth.enums import TokenScope
from buildbay.auth.logins import (
    IssuedTokens,
    LoginService,
    normalise_email,
    password_guess_keys,
    password_is_right,
    user_by_email,
)
from buildbay.auth.models import ApiToken, User
from buildbay.auth.reads import UserRecord
from buildbay.auth.tokens import API_TOKEN_DISPLAY_LENGTH, hash_token, new_api_token
from buildbay.auth.verification import EmailVerifications
from buildbay.config import Plan, SignupMode
from buildbay.db.reads import Reads
from buildbay.errors import Conflict, Forbidden, NotFound, ValidationFailed
from buildbay.ids import new_id
from buildbay.invitations.reads import invited
from buildbay.projects.models import ProjectMember
from buildbay.ratelimit.limiter import RateLimiter


class AccountService:
    """An account's changes, in the request's unit of work."""

    def __init__(
        self,
        db: AsyncSession,
        now: datetime,
        logins: LoginService,
        signup: SignupMode = SignupMode.OPEN,
        verification: EmailVerifications | None = None,
    ) -> None:
        """`logins`: the account's logins (a sign-up starts one, a new password or a reset ends
        them); `verification`: where sign-ups' verification mails go (None: none is sent)."""
        self.db = db
        self.now = now
        self.logins = logins
        self.signup = signup
        self.verification = verification

    async def register(self, email: str, password: str, name: str | None) -> IssuedTokens:
        """A new account, logged in; a mail to its address asks it to prove the address is
        its own (auth/verification.py). Nothing waits for that: the account works at once."""
        email = normalise_email(email)
        self.logins.passwords.check_sign_up()
        await self._may_sign_up(email)
        user = await self.create_account(email, password, name)
        if self.verification is not None:
            self.verification.send(user)
        return await self.logins.start_session(user, user.credentials_epoch)

    async def _may_sign_up(self, email: str) -> None:
        if self.signup is SignupMode.CLOSED:
            raise Forbidden(
                "Sign-up is closed on this server: ask its operator for an account",
                code="signup_closed",
            )
        if self.signup is SignupMode.INVITE_ONLY and not await invited(
            Reads.within(self.db), email, self.now
        ):
            raise Forbidden(
                "Sign-up on this server needs an invitation: ask an admin of your project to "
                "invite this e-mail, then follow the link in the mail",
                code="invitation_required",
            )

    async def create_account(self, email: str, password: str, name: str | None) -> User:
        """An account, whatever the sign-up mode (the operator's `buildbay users create`)."""
        email = normalise_email(email)
        if await user_by_email(self.db, email) is not None:
            raise Conflict("An account with this e-mail already exists", code="email_taken")
        user = User(
            id=new_id("usr"),
            email=email,
            name=name or email.split("@", 1)[0],
            password_hash=await passwords.hash_password(password),
            plan=Plan.FREE,
            created_at=self.now,
            updated_at=self.now,
            credentials_epoch=0,
        )
        self.db.add(user)
        try:
            await self.db.flush()
        except IntegrityError:  # registered concurrently a moment ago
            raise Conflict(
                "An account with this e-mail already exists", code="email_taken"
            ) from None
        return user

    async def change_password(
        self,
        principal: Principal,
        current_password: str,
        new_password: str,
        client_ip: str,
        limiter: RateLimiter,
    ) -> None:
        """Set a new password once the current one is proven. Every other login of the user ends
        (its refresh tokens and access tokens with it): whoever may have learnt the old password
        is logged out. The caller's own login goes on; API tokens are credentials of their own
        and stay until deleted.

        A wrong current password counts against the same failure budget as logins, so a stolen
        access token gives no faster way to guess the password than the login form does.
        """
        user = await self.db.get_one(User, principal.user.id)
        keys = password_guess_keys(user.email, client_ip)
        if not await password_is_right(
            limiter, keys, "Too many wrong passwords", current_password, user.password_hash
        ):
            raise ValidationFailed.for_field(
                "currentPassword", "is not your current password", code="wrong_password"
            )
        user.password_hash = await passwords.hash_password(new_password)
        user.updated_at = self.now
        await self.logins.revoke_sessions_of(user.id, keep=principal.session_id)
        # A change of address asked for with the old password is spent (auth/email_change.py).
        await drop_pending_change(self.db, user.id)
        self.record_about(user, Actor.of(user), AuditAction.PASSWORD_CHANGED)

    async def update_profile(
        self, principal: Principal, name: str | None, notify_new_builds: bool | None
    ) -> User:
        """Change what the caller sent of their name and their mail setting."""
        user = await self.db.get_one(User, principal.user.id)
        if name is not None:
            user.name = name
        if notify_new_builds is not None:
            user.notify_new_builds = notify_new_builds
        user.updated_at = self.now
        await self.db.flush()
        return user

    async def unsubscribe_from_new_builds(self, user_id: str) -> User | None:
        """The one-click unsubscribe (mail/unsubscribe.py): None if the user is gone."""
        user = await self.db.get(User, user_id)
        if user is not None and user.notify_new_builds:
            user.notify_new_builds = False
            user.updated_at = self.now
            await self.db.flush()
        return user

    # -- API tokens -----------------------------------------------------------------------------

    async def touch_api_token(self, token_id: str) -> None:
        await self.db.execute(
            update(ApiToken).where(ApiToken.id == token_id).values(last_used_at=self.now)
        )

    async def create_api_token(
        self,
        user: UserRecord,
        name: str,
        expires_in_days: int | None,
        scope: TokenScope | None = None,
        project_ids: Sequence[str] | None = None,
        via: dict[str, str] | None = None,
    ) -> tuple[ApiToken, str]:
        """A new token and its secret. `scope` and `project_ids` limit it (None: no limit);
        the projects must be the user's own. `via`: how it was asked for, when not by the
        account's token form (the audit entry's details; auth/cli_sign_in.py)."""
        if project_ids is not None:
            project_ids = list(dict.fromkeys(project_ids))  # once each, in the order given
            await self._check_member_of(user, project_ids)
        secret = new_api_token()
        api_token = ApiToken(
            id=new_id("tok"),
            user_id=user.id,
            name=name,
            prefix=secret[:API_TOKEN_DISPLAY_LENGTH],
            token_hash=hash_token(secret),
            created_at=self.now,
            expires_at=self.now + timedelta(days=expires_in_days) if expires_in_days else None,
            last_used_at=None,
            scope=scope,
            project_ids=project_ids,
            # The epoch of the login asking (as its authentication read it): a reset committed
            # since leaves this token dead, though it is written after.
            credentials_epoch=user.credentials_epoch,
        )
        self.db.add(api_token)
        await self.db.flush()
        self._record_token(user, api_token, AuditAction.TOKEN_CREATED, via or {})
        return api_token, secret

    async def delete_api_token(self, user: UserRecord, token_id: str) -> None:
        api_token = await self.db.scalar(
            select(ApiToken).where(ApiToken.id == token_id, ApiToken.user_id == user.id)
        )
        if api_token is None:
            raise NotFound("No API token with this id", code="api_token_not_found")
        await self.db.delete(api_token)
        self._record_token(user, api_token, AuditAction.TOKEN_REVOKED)

    async def delete_api_tokens_of(self, user_id: str) -> None:
        """Every API token of the user stops working at once (each request looks its token up)."""
        await self.db.execute(delete(ApiToken).where(ApiToken.user_id == user_id))

    async def end_every_credential(self, user_id: str) -> None:
        """Take the account back (a password reset): every session, access token, console
        cookie and API token of the user stops working once this commits, and so does any that
        a request running meanwhile makes from a proof read before the commit
        (`LoginService.end_every_login`); a change of address asked for with the old password
        is spent too (auth/email_change.py)."""
        await self.logins.end_every_login(user_id)
        await self.delete_api_tokens_of(user_id)
        await drop_pending_change(self.db, user_id)

    # -- helpers --------------------------------------------------------------------------------

    def record_about(
        self, user: HasIdAndEmail, by: Actor, action: AuditAction, **details: Any
    ) -> None:
        """An audit entry about the account `user` (shown in its own log)."""
        record(self.db, at=self.now, actor=by, action=action,
               target=Target("user", user.id, user.email), subject_user_id=user.id,
               details=details)  # fmt: skip

    def _record_token(
        self,
        user: UserRecord,
        api_token: ApiToken,
        action: AuditAction,
        via: dict[str, str] | None = None,
    ) -> None:
        """An entry naming the token by its name and display prefix, never its secret."""
        details: dict[str, Any] = {"prefix": api_token.prefix, **(via or {})}
        if action is AuditAction.TOKEN_CREATED:
            details |= {"scope": api_token.scope.value if api_token.scope else None,
                        "projectIds": api_token.project_ids,
                        "expiresAt": api_token.expires_at.isoformat()
                        if api_token.expires_at else None}  # fmt: skip
        record(self.db, at=self.now, actor=Actor.of(user), action=action,
               target=Target("api_token", api_token.id, api_token.name),
               subject_user_id=user.id, details=details)  # fmt: skip

    async def _check_member_of(self, user: UserRecord, project_ids: Sequence[str]) -> None:
        if not project_ids:
            raise ValidationFailed.for_field("projectIds", "name at least one project")
        theirs = set(
            await self.db.scalars(
                select(ProjectMember.project_id).where(
                    ProjectMember.user_id == user.id, ProjectMember.project_id.in_(project_ids)
                )
            )
        )
        others = [p for p in project_ids if p not in theirs]
        if others:
            what = "is not a project" if len(others) == 1 else "are not projects"
            raise ValidationFailed.for_field(
                "projectIds",
                f"{', '.join(others)} {what} you are a member of",
                code="not_your_project",
            )

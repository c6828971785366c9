"""Logins: a session per login, its access tokens and single-use refresh tokens, and their end
(a logout, a reused refresh token, a password changed or reset). An ended session's access
tokens stop working once the end commits, in the caches too (auth/cache.py, in this process;
auth/revocations.py, in the others)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.audit.record import Actor, ActorKind, AuditAction, Target, record
from buildbay.auth import passwords
from buildbay.auth.authentication import Principal
from buildbay.auth.cache import AccessTokenCache
from buildbay.auth.models import RefreshToken, Session, User
from buildbay.auth.revocations import SharedRevocations
from buildbay.auth.tokens import AccessTokenCodec, hash_token, new_refresh_token
from buildbay.db.engine import after_commit
from buildbay.errors import NotAuthenticated, RateLimited
from buildbay.ids import new_id
from buildbay.ratelimit.limiter import RateLimiter
from buildbay.sso.policy import PASSWORDS_ALLOWED, PasswordPolicy
from buildbay.text import normal_email_text

# SSO-only, said to every refused password sign-in alike: an operator who mistyped a
# break-glass password is told why, and nobody learns whether the address typed is one.
BREAK_GLASS_NOTE = (
    ". Only the operator's break-glass accounts sign in with a password, with the right one"
)


@dataclass(frozen=True, slots=True)
class IssuedTokens:
    user: User
    access_token: str
    refresh_token: str
    expires_in: int
    session_id: str  # the login they belong to (the web console ties its cookie to it)


def normalise_email(email: str) -> str:
    """As stored and compared (buildbay.text.normal_email_text); a login may keep the spaces
    around what was typed."""
    return normal_email_text(email.strip())


def password_guess_keys(email: str, client_ip: str) -> tuple[str, str]:
    """The failure counters a wrong password is counted in: the account's and the client's."""
    return (f"email:{email}", f"ip:{client_ip}")


async def password_is_right(
    limiter: RateLimiter,
    keys: tuple[str, str],
    what: str,
    password: str,
    password_hash: str | None,
) -> bool:
    """Check a password within the failure budgets of `keys` (429 once one is spent). The
    check is reserved before it runs, so concurrent guesses cannot all slip in before the first
    failure is counted; a wrong password, or a check that never finished, counts as a failure."""
    check = await limiter.reserve_password_check(*keys)
    if check.retry_after is not None:
        raise RateLimited(
            f"{what}; wait before trying again",
            code="login_throttled",
            headers={"Retry-After": str(check.retry_after)},
        )
    right = False
    try:
        right = await passwords.verify_password(password, password_hash)
    finally:
        if right:
            await check.release()
        else:
            await check.failed()
    return right


async def user_by_email(db: AsyncSession, email: str) -> User | None:
    """The account of `email` (as `normalise_email` gives it), in the unit of work."""
    return await db.scalar(select(User).where(User.email == email))


class LoginService:
    """Logins and their ends, in the request's unit of work."""

    def __init__(
        self,
        db: AsyncSession,
        codec: AccessTokenCodec,
        now: datetime,
        refresh_lifetime: timedelta,
        access_cache: AccessTokenCache | None = None,
        revocations: SharedRevocations | None = None,
        passwords: PasswordPolicy = PASSWORDS_ALLOWED,
    ) -> None:
        """`passwords`: who may sign in with a password (sso/policy.py: BUILDBAY_OIDC_ONLY)."""
        self.db = db
        self.passwords = passwords
        self.codec = codec
        self.now = now
        self.refresh_lifetime = refresh_lifetime
        self.access_cache = access_cache
        self.revocations = revocations

    async def login(
        self, email: str, password: str, client_ip: str, limiter: RateLimiter
    ) -> IssuedTokens:
        """A password sign-in, recorded in the audit log either way: a failure as typed (the
        e-mail, never the password), in its own right since the request fails
        (`keeps_writes`), and about the account of that e-mail if there is one.

        SSO-only (BUILDBAY_OIDC_ONLY), only the right password of a break-glass address signs
        in, and every other attempt, whatever the address, is answered the same 403 `sso_only`
        ("Password sign-in is off on this server: sign in with <provider>"), after the same
        work (the password checked, within the same failure budgets): a wrong password of a
        break-glass address is not told apart from any other address's, so nobody learns which
        addresses are break-glass without holding one's password, and everyone else is told
        plainly to use the provider."""
        typed, email = email, normalise_email(email)
        keys = password_guess_keys(email, client_ip)
        user = await user_by_email(self.db, email)
        # The epoch read with the password: a reset that commits while this login checks the
        # old password moves the user's on, and the session made here is dead at once.
        password_hash, epoch = (user.password_hash, user.credentials_epoch) if user else (None, 0)
        right = await password_is_right(
            limiter, keys, "Too many failed logins", password, password_hash
        )
        if not right or not self.passwords.may_use_password(email):
            record(self.db, at=self.now, actor=Actor(ActorKind.USER, None, typed),
                   action=AuditAction.SIGN_IN_FAILED,
                   target=Target("user", user.id, user.email) if user else None,
                   subject_user_id=user.id if user else None,
                   details={"method": "password"})  # fmt: skip
            if self.passwords.sso_only:
                raise self.passwords.refusal("Password sign-in", note=BREAK_GLASS_NOTE,
                                             keeps_writes=True)  # fmt: skip
            raise NotAuthenticated(
                "E-mail or password is wrong", code="invalid_credentials", keeps_writes=True
            )
        assert user is not None
        issued = await self.start_session(user, epoch)
        record(self.db, at=self.now, actor=Actor.of(user), action=AuditAction.SIGN_IN,
               target=Target("user", user.id, user.email), subject_user_id=user.id,
               details={"method": "password"})  # fmt: skip
        return issued

    async def refresh(self, refresh_token: str) -> IssuedTokens:
        row = (
            await self.db.execute(
                select(RefreshToken, Session, User.credentials_epoch)
                .join(Session, Session.id == RefreshToken.session_id)
                .join(User, User.id == Session.user_id)
                .where(RefreshToken.token_hash == hash_token(refresh_token))
            )
        ).first()
        if row is None:
            raise NotAuthenticated("The refresh token is invalid", code="invalid_token")
        token, session, epoch = row
        if (
            session.revoked_at is not None
            or session.expires_at <= self.now
            or session.credentials_epoch < epoch
        ):
            raise NotAuthenticated("The session has ended; log in again", code="session_ended")
        # Single use: the conditional update is what decides, so two concurrent refreshes with
        # the same token cannot both win.
        claimed = await self.db.execute(
            update(RefreshToken)
            .where(RefreshToken.id == token.id, RefreshToken.used_at.is_(None))
            .values(used_at=self.now)
        )
        if claimed.rowcount != 1:  # type: ignore[attr-defined]
            await self._revoke_session(session.id)
            raise NotAuthenticated(
                "This refresh token was already used; the whole session is revoked",
                code="refresh_token_reused",
                keeps_writes=True,  # the revocation stands although this request fails
            )
        user = await self.db.get_one(User, session.user_id)
        return await self._issue(user, session)

    async def end_session(self, session_id: str) -> None:
        """Revoke a login: every token of it stops working (the web console's logout)."""
        await self._revoke_session(session_id)

    async def logout(self, principal: Principal, refresh_token: str | None) -> None:
        if principal.session_id is not None:
            await self._revoke_session(principal.session_id)
        if refresh_token:
            session_id = await self.db.scalar(
                select(RefreshToken.session_id)
                .join(Session, Session.id == RefreshToken.session_id)
                .where(
                    RefreshToken.token_hash == hash_token(refresh_token),
                    Session.user_id == principal.user.id,
                )
            )
            if session_id is not None:
                await self._revoke_session(session_id)

    async def logout_everywhere(self, user_id: str) -> None:
        """Sign out everywhere: every login of the user ends, the caller's too (its browsers'
        cookies, apps' and command lines' access and refresh tokens). API tokens are
        credentials of their own and stay until deleted."""
        await self.revoke_sessions_of(user_id, keep=None)

    async def start_session(self, user: User, epoch: int) -> IssuedTokens:
        """A new login, made from a proof read at the user's `epoch` (models.User)."""
        session = Session(
            id=new_id("ses"),
            user_id=user.id,
            created_at=self.now,
            expires_at=self.now + self.refresh_lifetime,
            revoked_at=None,
            credentials_epoch=epoch,
        )
        self.db.add(session)
        await self.db.flush()  # the session row before the refresh token that points at it
        return await self._issue(user, session)

    async def _issue(self, user: User, session: Session) -> IssuedTokens:
        refresh = new_refresh_token()
        self.db.add(
            RefreshToken(
                id=new_id("rft"),
                session_id=session.id,
                token_hash=hash_token(refresh),
                created_at=self.now,
                used_at=None,
            )
        )
        await self.db.flush()
        return IssuedTokens(
            user=user,
            access_token=self.codec.issue(user.id, session.id, self.now),
            refresh_token=refresh,
            expires_in=int(self.codec.lifetime.total_seconds()),
            session_id=session.id,
        )

    async def _revoke_session(self, session_id: str) -> None:
        revoked = await self.db.execute(
            update(Session)
            .where(Session.id == session_id, Session.revoked_at.is_(None))
            .values(revoked_at=self.now)
            .returning(Session.id, Session.user_id)
        )
        self._forget_when_committed(revoked.all())

    async def end_every_login(self, user_id: str) -> None:
        """Every session of the user ends once this commits, and so does any credential that a
        request running meanwhile makes from a proof read before the commit (a login with the
        old password, an API token asked for by a session ended here): the user's epoch moves
        on, and those keep the older one (models.User). A password reset's first step
        (auth/accounts.py `end_every_credential`)."""
        await self.db.execute(
            update(User)
            .where(User.id == user_id)
            .values(credentials_epoch=User.credentials_epoch + 1)
        )
        await self.revoke_sessions_of(user_id, keep=None)
        # Cached access tokens of the user go, those of sessions made meanwhile too (the
        # revocation above cannot name them), in this process and, by the user's mark, in the
        # others.
        cache = self.access_cache
        if cache is not None:

            async def forget_user() -> None:
                cache.forget_user(user_id)

            after_commit(self.db, forget_user)
        shared = self.revocations
        if shared is not None:
            after_commit(self.db, lambda: shared.announce((user_id,)))

    async def revoke_sessions_of(self, user_id: str, *, keep: str | None) -> None:
        """Revoke every live session of the user but `keep`."""
        revoke = (
            update(Session)
            .where(Session.user_id == user_id, Session.revoked_at.is_(None))
            .values(revoked_at=self.now)
            .returning(Session.id, Session.user_id)
        )
        if keep is not None:
            revoke = revoke.where(Session.id != keep)
        self._forget_when_committed((await self.db.execute(revoke)).all())

    def _forget_when_committed(self, revoked: Sequence[tuple[str, str]]) -> None:
        """Have the access-token caches forget these (session id, user id) once revoked."""
        if not revoked:
            return
        cache = self.access_cache
        if cache is not None:

            async def forget() -> None:
                for session_id, _user_id in revoked:
                    cache.forget_session(session_id)

            # Forgotten once the revocation has committed: any earlier, and a request in between
            # could read the still-live row and cache it again (one that reads it meanwhile is
            # not kept: auth/cache.py's generation). And before the response goes out: a client
            # told its token is revoked never sees it pass.
            after_commit(self.db, forget)
        shared = self.revocations
        if shared is not None:
            # The other processes' caches stop serving them before this response goes out.
            after_commit(self.db, lambda: shared.announce(user_id for _, user_id in revoked))

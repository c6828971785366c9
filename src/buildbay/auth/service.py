"""Accounts, sessions and tokens: what registering, logging in, refreshing and logging out do."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import bindparam, event, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.auth import passwords
from buildbay.auth.cache import AccessTokenCache, CachedAccess
from buildbay.auth.models import ApiToken, RefreshToken, Session, User
from buildbay.auth.revocations import SharedRevocations
from buildbay.auth.tokens import (
    API_TOKEN_DISPLAY_LENGTH,
    AccessTokenCodec,
    ensure_unexpired,
    hash_token,
    new_api_token,
    new_refresh_token,
)
from buildbay.config import Plan
from buildbay.db.engine import after_commit
from buildbay.errors import Conflict, NotAuthenticated, NotFound, RateLimited, ValidationFailed
from buildbay.ids import new_id
from buildbay.ratelimit.limiter import RateLimiter

API_TOKEN_TOUCH_INTERVAL = timedelta(minutes=1)

# Built once, not per request: composing a statement costs more than SQLite takes to run it.
# Core over the tables rather than ORM entities: the row is all the lookup needs (and all the
# cache keeps), and the ORM's loading would cost more than the query.
_users = User.__table__
_sessions = Session.__table__
_USER_OF_LIVE_SESSION = (
    select(_users)
    .join(_sessions, _sessions.c.user_id == _users.c.id)
    .where(
        _sessions.c.id == bindparam("session_id"),
        _users.c.id == bindparam("user_id"),
        _sessions.c.revoked_at.is_(None),
    )
)


@dataclass(frozen=True, slots=True)
class IssuedTokens:
    user: User
    access_token: str
    refresh_token: str
    expires_in: int
    session_id: str  # the login they belong to (the web console ties its cookie to it)


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: a user, through a login session or through an API token.

    Through an access token, `user` is a copy of the users row as the lookup read it, possibly
    cached for a moment and shared by other requests: not an object of the request's database
    session, and not to be modified.
    """

    user: User
    session_id: str | None = None
    api_token_id: str | None = None


def normalise_email(email: str) -> str:
    return email.strip().lower()


def _password_guess_keys(email: str, client_ip: str) -> tuple[str, str]:
    """The failure counters a wrong password is counted in: the account's and the client's."""
    return (f"email:{email}", f"ip:{client_ip}")


async def _ensure_not_throttled(limiter: RateLimiter, keys: tuple[str, str], what: str) -> None:
    retry_after = await limiter.login_retry_after(*keys)
    if retry_after is not None:
        raise RateLimited(
            f"{what}; wait before trying again",
            code="login_throttled",
            headers={"Retry-After": str(retry_after)},
        )


class AuthService:
    def __init__(
        self,
        db: AsyncSession,
        codec: AccessTokenCodec,
        now: datetime,
        refresh_lifetime: timedelta,
        access_cache: AccessTokenCache | None = None,
        revocations: SharedRevocations | None = None,
    ) -> None:
        self.db = db
        self.codec = codec
        self.now = now
        self.refresh_lifetime = refresh_lifetime
        self.access_cache = access_cache
        self.revocations = revocations

    # -- accounts -------------------------------------------------------------------------------

    async def register(self, email: str, password: str, name: str | None) -> IssuedTokens:
        email = normalise_email(email)
        if await self._user_by_email(email) is not None:
            raise Conflict("An account with this e-mail already exists", code="email_taken")
        user = User(
            id=new_id("usr"),
            email=email,
            name=name or email.split("@", 1)[0],
            password_hash=await passwords.hash_password(password),
            plan=Plan.FREE,
            created_at=self.now,
            updated_at=self.now,
        )
        self.db.add(user)
        try:
            await self.db.flush()
        except IntegrityError:  # registered concurrently a moment ago
            raise Conflict(
                "An account with this e-mail already exists", code="email_taken"
            ) from None
        return await self._start_session(user)

    async def login(
        self, email: str, password: str, client_ip: str, limiter: RateLimiter
    ) -> IssuedTokens:
        email = normalise_email(email)
        keys = _password_guess_keys(email, client_ip)
        await _ensure_not_throttled(limiter, keys, "Too many failed logins")
        user = await self._user_by_email(email)
        if not await passwords.verify_password(password, user.password_hash if user else None):
            await limiter.count_login_failure(*keys)
            raise NotAuthenticated("E-mail or password is wrong", code="invalid_credentials")
        assert user is not None
        return await self._start_session(user)

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
        keys = _password_guess_keys(user.email, client_ip)
        await _ensure_not_throttled(limiter, keys, "Too many wrong passwords")
        if not await passwords.verify_password(current_password, user.password_hash):
            await limiter.count_login_failure(*keys)
            raise ValidationFailed.for_field(
                "currentPassword", "is not your current password", code="wrong_password"
            )
        user.password_hash = await passwords.hash_password(new_password)
        user.updated_at = self.now
        await self._revoke_sessions_of(user.id, keep=principal.session_id)

    # -- sessions and tokens --------------------------------------------------------------------

    async def refresh(self, refresh_token: str) -> IssuedTokens:
        row = (
            await self.db.execute(
                select(RefreshToken, Session)
                .join(Session, Session.id == RefreshToken.session_id)
                .where(RefreshToken.token_hash == hash_token(refresh_token))
            )
        ).first()
        if row is None:
            raise NotAuthenticated("The refresh token is invalid", code="invalid_token")
        token, session = row
        if session.revoked_at is not None or session.expires_at <= self.now:
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
            # The revocation must stand although this request fails.
            await self.db.commit()
            raise NotAuthenticated(
                "This refresh token was already used; the whole session is revoked",
                code="refresh_token_reused",
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

    async def authenticate_access_token(self, token: str) -> Principal:
        cache, shared = self.access_cache, self.revocations
        cached = cache.get(token, self.now) if cache is not None else None
        if cached is not None and (
            shared is None or await shared.mark(cached.claims.user_id) == cached.mark
        ):
            ensure_unexpired(cached.claims, self.now)
            return Principal(user=cached.user, session_id=cached.claims.session_id)
        claims = self.codec.decode(token, self.now)
        # Both read before the query, which must be the first of this session's transaction (so
        # that it reads the database as of now, not as of an earlier snapshot): a revocation
        # committed after the query then moves one of them on, and the answer is not kept.
        generation = cache.generation if cache is not None else 0
        mark = await shared.mark(claims.user_id) if shared is not None else None
        row = (
            await self.db.execute(
                _USER_OF_LIVE_SESSION,
                {"session_id": claims.session_id, "user_id": claims.user_id},
            )
        ).first()
        if row is None:
            raise NotAuthenticated("The access token has been revoked", code="token_revoked")
        user = User(**row._mapping)
        if cache is not None and (shared is None or mark is not None):
            cache.put(token, CachedAccess(claims, user, self.now, mark), generation)
        return Principal(user=user, session_id=claims.session_id)

    async def authenticate_api_token(self, token: str) -> Principal:
        row = (
            await self.db.execute(
                select(ApiToken, User)
                .join(User, User.id == ApiToken.user_id)
                .where(ApiToken.token_hash == hash_token(token))
            )
        ).first()
        if row is None:
            raise NotAuthenticated("The API token is invalid or revoked", code="invalid_token")
        api_token, user = row
        if api_token.expires_at is not None and api_token.expires_at <= self.now:
            raise NotAuthenticated("The API token has expired", code="token_expired")
        last = api_token.last_used_at
        if last is None or self.now - last >= API_TOKEN_TOUCH_INTERVAL:
            api_token.last_used_at = self.now
        return Principal(user=user, api_token_id=api_token.id)

    # -- API tokens -----------------------------------------------------------------------------

    async def list_api_tokens(self, user: User) -> list[ApiToken]:
        result = await self.db.scalars(
            select(ApiToken).where(ApiToken.user_id == user.id).order_by(ApiToken.id.desc())
        )
        return list(result)

    async def create_api_token(
        self, user: User, name: str, expires_in_days: int | None
    ) -> tuple[ApiToken, str]:
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
        )
        self.db.add(api_token)
        await self.db.flush()
        return api_token, secret

    async def delete_api_token(self, user: User, token_id: str) -> None:
        api_token = await self.db.scalar(
            select(ApiToken).where(ApiToken.id == token_id, ApiToken.user_id == user.id)
        )
        if api_token is None:
            raise NotFound("No API token with this id", code="api_token_not_found")
        await self.db.delete(api_token)

    # -- helpers --------------------------------------------------------------------------------

    async def _user_by_email(self, email: str) -> User | None:
        return await self.db.scalar(select(User).where(User.email == email))

    async def _start_session(self, user: User) -> IssuedTokens:
        session = Session(
            id=new_id("ses"),
            user_id=user.id,
            created_at=self.now,
            expires_at=self.now + self.refresh_lifetime,
            revoked_at=None,
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

    async def _revoke_sessions_of(self, user_id: str, *, keep: str | None) -> None:
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

            def forget(_: object) -> None:
                for session_id, _user_id in revoked:
                    cache.forget_session(session_id)

            # Forgotten as the revocation commits: any earlier, and a request in between could
            # read the still-live row and cache it again; any later, and a revoked token would
            # still pass. (A listener on this request's session, so it goes with the session.)
            event.listen(self.db.sync_session, "after_commit", forget)
        shared = self.revocations
        if shared is not None:
            # The other processes' caches stop serving them before this response goes out.
            after_commit(self.db, lambda: shared.announce(user_id for _, user_id in revoked))

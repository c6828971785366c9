"""Accounts, sessions and tokens: what registering, logging in, refreshing and logging out do."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import bindparam, delete, event, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.auth import passwords
from buildbay.auth.cache import AccessTokenCache, CachedAccess
from buildbay.auth.enums import TokenScope
from buildbay.auth.models import ApiToken, RefreshToken, Session, User
from buildbay.auth.reads import USER, UserRecord
from buildbay.auth.revocations import SharedRevocations
from buildbay.auth.tokens import (
    API_TOKEN_DISPLAY_LENGTH,
    AccessTokenCodec,
    ensure_unexpired,
    hash_token,
    new_api_token,
    new_refresh_token,
)
from buildbay.auth.verification import EmailVerifications
from buildbay.config import Plan, SignupMode
from buildbay.db.engine import after_commit
from buildbay.db.reads import Reads
from buildbay.errors import (
    Conflict,
    Forbidden,
    NotAuthenticated,
    NotFound,
    RateLimited,
    ValidationFailed,
)
from buildbay.ids import new_id
from buildbay.invitations.reads import invited
from buildbay.projects.models import ProjectMember
from buildbay.ratelimit.limiter import RateLimiter
from buildbay.text import normal_email_text

API_TOKEN_TOUCH_INTERVAL = timedelta(minutes=1)

# Built once, not per request: composing a statement costs more than SQLite takes to run it.
# Core over the tables rather than ORM entities: the row is all the lookup needs (and all the
# cache keeps), and the ORM's loading would cost more than the query.
_users = User.__table__
_sessions = Session.__table__
_USER_OF_LIVE_SESSION = (
    select(*USER.columns)
    .join(_sessions, _sessions.c.user_id == _users.c.id)
    .where(
        _sessions.c.id == bindparam("session_id"),
        _users.c.id == bindparam("user_id"),
        _sessions.c.revoked_at.is_(None),
        # Made before a password reset took the account back: dead (models.User).
        _sessions.c.credentials_epoch >= _users.c.credentials_epoch,
    )
)


_API_TOKENS = ApiToken.__table__
_TOKEN_COLUMNS = [
    _API_TOKENS.c[name].label(f"token_{name}")
    for name in ("id", "expires_at", "last_used_at", "scope", "project_ids")
]
_TOKEN_FIELDS = tuple(column.name for column in _TOKEN_COLUMNS)
_USER_OF_API_TOKEN = (
    select(*USER.columns, *_TOKEN_COLUMNS)
    .join(_API_TOKENS, _API_TOKENS.c.user_id == _users.c.id)
    .where(
        _API_TOKENS.c.token_hash == bindparam("token_hash"),
        _API_TOKENS.c.credentials_epoch >= _users.c.credentials_epoch,
    )
)


class Authentication:
    """Who a token belongs to: a read, on reads of their own (db/reads.py). The user comes back
    as a frozen `UserRecord` (see Principal)."""

    def __init__(
        self,
        reads: Reads,
        codec: AccessTokenCodec,
        now: datetime,
        access_cache: AccessTokenCache | None = None,
        revocations: SharedRevocations | None = None,
    ) -> None:
        self.reads = reads
        self.codec = codec
        self.now = now
        self.access_cache = access_cache
        self.revocations = revocations

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
        row = await self.reads.first(
            _USER_OF_LIVE_SESSION, {"session_id": claims.session_id, "user_id": claims.user_id}
        )
        if row is None:
            raise NotAuthenticated("The access token has been revoked", code="token_revoked")
        user = USER.of(row)
        if cache is not None and (shared is None or mark is not None):
            cache.put(token, CachedAccess(claims, user, self.now, mark), generation)
        return Principal(user=user, session_id=claims.session_id)

    async def authenticate_api_token(self, token: str) -> Principal:
        row = await self.reads.first(_USER_OF_API_TOKEN, {"token_hash": hash_token(token)})
        if row is None:
            raise NotAuthenticated("The API token is invalid or revoked", code="invalid_token")
        token_fields = {key: row[key] for key in _TOKEN_FIELDS}
        user = USER.of(row)
        expires_at = token_fields["token_expires_at"]
        if expires_at is not None and expires_at <= self.now:
            raise NotAuthenticated("The API token has expired", code="token_expired")
        projects = token_fields["token_project_ids"]
        return Principal(
            user=user,
            api_token_id=token_fields["token_id"],
            api_token_used_at=token_fields["token_last_used_at"],
            scope=token_fields["token_scope"],
            project_ids=frozenset(projects) if projects is not None else None,
        )

    def needs_touch(self, principal: Principal) -> bool:
        """Whether the API token's `lastUsedAt` is due (it is kept to the minute)."""
        last = principal.api_token_used_at
        return principal.api_token_id is not None and (
            last is None or self.now - last >= API_TOKEN_TOUCH_INTERVAL
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

    `user` is the users row as the lookup read it (possibly cached for a moment and shared by
    other requests): a frozen record, not an object of the request's unit of work. A change
    to the user loads the `User` in that unit of work.
    """

    user: UserRecord
    session_id: str | None = None
    api_token_id: str | None = None
    api_token_used_at: datetime | None = None  # as the lookup read it
    # An API token's limits: its scope (None: all the user may do) and the projects it may
    # reach (None: all of the user's). A login has neither.
    scope: TokenScope | None = None
    project_ids: frozenset[str] | None = None

    def require_login(self) -> None:
        """The account's own endpoints: a login (an access token, the console's cookie), never
        an API token, so that a leaked token cannot make more tokens or take the account."""
        if self.api_token_id is not None:
            raise Forbidden(
                "API tokens cannot manage the account: log in with your e-mail and password "
                "(or in the web console) and do this with that session",
                code="interactive_session_required",
            )

    def require_project(self, project_id: str | None) -> None:
        """403 unless the token may reach this project (`None`: something of no project yet,
        such as a new one, which only an unrestricted token may create)."""
        if self.project_ids is None or project_id in self.project_ids:
            return
        raise Forbidden(
            "This API token is restricted to other projects"
            if project_id is not None
            else "This API token is restricted to some projects and cannot create one",
            code="token_not_allowed",
        )

    def require_scope(self, needed: TokenScope | None) -> None:
        """403 unless the token's scope includes `needed` (`None`: only a token without a
        scope, which may do all its user may)."""
        if self.scope is None or (needed is not None and self.scope.includes(needed)):
            return
        wanted = f"the {needed.value} scope" if needed else "a token without a scope"
        raise Forbidden(
            f"This API token has the {self.scope.value} scope; this needs {wanted}",
            code="insufficient_scope",
        )


def normalise_email(email: str) -> str:
    """As stored and compared (buildbay.text.normal_email_text); a login may keep the spaces
    around what was typed."""
    return normal_email_text(email.strip())


def _password_guess_keys(email: str, client_ip: str) -> tuple[str, str]:
    """The failure counters a wrong password is counted in: the account's and the client's."""
    return (f"email:{email}", f"ip:{client_ip}")


async def _password_is_right(
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


class AuthService:
    def __init__(
        self,
        db: AsyncSession,
        codec: AccessTokenCodec,
        now: datetime,
        refresh_lifetime: timedelta,
        access_cache: AccessTokenCache | None = None,
        revocations: SharedRevocations | None = None,
        signup: SignupMode = SignupMode.OPEN,
        verification: EmailVerifications | None = None,
    ) -> None:
        """`verification`: where sign-ups' verification mails go (None: none is sent)."""
        self.db = db
        self.codec = codec
        self.now = now
        self.refresh_lifetime = refresh_lifetime
        self.access_cache = access_cache
        self.revocations = revocations
        self.signup = signup
        self.verification = verification

    # -- accounts -------------------------------------------------------------------------------

    async def register(self, email: str, password: str, name: str | None) -> IssuedTokens:
        """A new account, logged in; a mail to its address asks it to prove the address is
        its own (auth/verification.py). Nothing waits for that: the account works at once."""
        email = normalise_email(email)
        await self._may_sign_up(email)
        user = await self.create_account(email, password, name)
        if self.verification is not None:
            self.verification.send(user)
        return await self._start_session(user, user.credentials_epoch)

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

    async def login(
        self, email: str, password: str, client_ip: str, limiter: RateLimiter
    ) -> IssuedTokens:
        email = normalise_email(email)
        keys = _password_guess_keys(email, client_ip)
        user = await self._user_by_email(email)
        # The epoch read with the password: a reset that commits while this login checks the
        # old password moves the user's on, and the session made here is dead at once.
        password_hash, epoch = (user.password_hash, user.credentials_epoch) if user else (None, 0)
        if not await _password_is_right(
            limiter, keys, "Too many failed logins", password, password_hash
        ):
            raise NotAuthenticated("E-mail or password is wrong", code="invalid_credentials")
        assert user is not None
        return await self._start_session(user, epoch)

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
        if not await _password_is_right(
            limiter, keys, "Too many wrong passwords", current_password, user.password_hash
        ):
            raise ValidationFailed.for_field(
                "currentPassword", "is not your current password", code="wrong_password"
            )
        user.password_hash = await passwords.hash_password(new_password)
        user.updated_at = self.now
        await self.revoke_sessions_of(user.id, keep=principal.session_id)

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

    # -- sessions and tokens --------------------------------------------------------------------

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

    async def touch_api_token(self, token_id: str) -> None:
        await self.db.execute(
            update(ApiToken).where(ApiToken.id == token_id).values(last_used_at=self.now)
        )

    # -- API tokens -----------------------------------------------------------------------------

    async def list_api_tokens(self, user: UserRecord) -> list[ApiToken]:
        result = await self.db.scalars(
            select(ApiToken).where(ApiToken.user_id == user.id).order_by(ApiToken.id.desc())
        )
        return list(result)

    async def create_api_token(
        self,
        user: UserRecord,
        name: str,
        expires_in_days: int | None,
        scope: TokenScope | None = None,
        project_ids: Sequence[str] | None = None,
    ) -> tuple[ApiToken, str]:
        """A new token and its secret. `scope` and `project_ids` limit it (None: no limit);
        the projects must be the user's own."""
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
        return api_token, secret

    async def delete_api_token(self, user: UserRecord, token_id: str) -> None:
        api_token = await self.db.scalar(
            select(ApiToken).where(ApiToken.id == token_id, ApiToken.user_id == user.id)
        )
        if api_token is None:
            raise NotFound("No API token with this id", code="api_token_not_found")
        await self.db.delete(api_token)

    async def delete_api_tokens_of(self, user_id: str) -> None:
        """Every API token of the user stops working at once (each request looks its token up)."""
        await self.db.execute(delete(ApiToken).where(ApiToken.user_id == user_id))

    async def end_every_credential(self, user_id: str) -> None:
        """Take the account back (a password reset): every session, access token, console
        cookie and API token of the user stops working once this commits, and so does any that
        a request running meanwhile makes from a proof read before the commit (a login with
        the old password, a token asked for by a session ended here): the user's epoch moves
        on, and those keep the older one (models.User)."""
        await self.db.execute(
            update(User)
            .where(User.id == user_id)
            .values(credentials_epoch=User.credentials_epoch + 1)
        )
        await self.revoke_sessions_of(user_id, keep=None)
        await self.delete_api_tokens_of(user_id)
        # Cached access tokens of the user go, those of sessions made meanwhile too (the
        # revocation above cannot name them), in this process and, by the user's mark, in the
        # others.
        cache = self.access_cache
        if cache is not None:
            event.listen(self.db.sync_session, "after_commit", lambda _: cache.forget_user(user_id))
        shared = self.revocations
        if shared is not None:
            after_commit(self.db, lambda: shared.announce((user_id,)))

    # -- helpers --------------------------------------------------------------------------------

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

    async def _user_by_email(self, email: str) -> User | None:
        return await self.db.scalar(select(User).where(User.email == email))

    async def _start_session(self, user: User, epoch: int) -> IssuedTokens:
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

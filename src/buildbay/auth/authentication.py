"""Who is calling: the user a token (an access token or an API token) belongs to, read on reads
of its own (db/reads.py), and what that caller may reach (`Principal`). Logging in, which makes
the tokens, is auth/logins.py's."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import bindparam, select

from buildbay.auth.cache import AccessTokenCache, CachedAccess
from buildbay.auth.enums import TokenScope
from buildbay.auth.models import ApiToken, Session, User
from buildbay.auth.reads import USER, UserRecord
from buildbay.auth.revocations import SharedRevocations
from buildbay.auth.tokens import AccessTokenCodec, ensure_unexpired, hash_token
from buildbay.db.reads import Reads
from buildbay.errors import Forbidden, NotAuthenticated
from buildbay.sso.policy import PASSWORDS_ALLOWED, PasswordPolicy

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
    for name in (
        "id",
        "expires_at",
        "last_used_at",
        "scope",
        "project_ids",
        "application_id",
        "ci_identity",
    )
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
            application_id=token_fields["token_application_id"],
            ci_identity=token_fields["token_ci_identity"],
        )

    def needs_touch(self, principal: Principal) -> bool:
        """Whether the API token's `lastUsedAt` is due (it is kept to the minute)."""
        last = principal.api_token_used_at
        return principal.api_token_id is not None and (
            last is None or self.now - last >= API_TOKEN_TOUCH_INTERVAL
        )


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
    # A trusted publisher's exchanged token (publishers/): the one application it may reach,
    # and the CI identity ("<issuer> <subject>") acting through it, whom the audit log names
    # (audit/record.py `actor_of`). None for the rest.
    application_id: str | None = None
    ci_identity: str | None = None

    def require_login(self, passwords: PasswordPolicy = PASSWORDS_ALLOWED) -> None:
        """The account's own endpoints: a login (an access token, the console's cookie), never
        an API token, so that a leaked token cannot make more tokens or take the account.
        `passwords`: how people sign in here (BUILDBAY_OIDC_ONLY: with the provider only)."""
        if self.api_token_id is None:
            return
        if passwords.sso_only:  # no password signs in here: the console's session is the way
            how = f"sign in with {passwords.provider_name} in the web console and do this there"
        else:
            how = (
                "log in with your e-mail and password (or in the web console) and do this with "
                "that session"
            )
        raise Forbidden(
            f"API tokens cannot manage the account: {how}", code="interactive_session_required"
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

    def require_application(self, application_id: str | None) -> None:
        """403 unless the token may reach this application (`None`: something that is not one
        application's, which a trusted publisher's token may never reach)."""
        if self.application_id is None or self.application_id == application_id:
            return
        raise Forbidden(
            "This token is a trusted publisher's: it may upload builds of its own application "
            "and nothing else",
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

"""A few seconds' memory of access-token lookups, so that a client sending the same token again
and again costs one signature check and one database query per few seconds, not one per request.

Revocation stays immediate: auth/logins.py makes the cache forget a session (a password reset:
every session of the user) once the transaction revoking it has committed, before its response
goes out (db/engine.py `after_commit`), and a lookup that was running meanwhile is not stored
(see `generation`). With several processes (Redis
configured), a process also has to learn of the others' revocations: each entry keeps the
user's revocation mark as it was read before the lookup (auth/revocations.py), and serves
only while the mark in Redis is still the same. What can lag, by at most ACCESS_CACHE_TTL, is a
change made to the user's row from outside the API, such as `buildbay users set-plan`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from buildbay.auth.reads import UserRecord
from buildbay.auth.tokens import AccessClaims

ACCESS_CACHE_TTL = timedelta(seconds=2)
ACCESS_CACHE_MAX_ENTRIES = 10_000
_NO_TIME = timedelta(0)


@dataclass(frozen=True, slots=True)
class CachedAccess:
    claims: AccessClaims
    # Read once, then shared by the requests that hit the entry: frozen.
    user: UserRecord
    stored_at: datetime
    # The user's revocation mark read before the lookup (several processes only; see
    # auth/revocations.py).
    mark: bytes | None = None


class AccessTokenCache:
    def __init__(
        self, ttl: timedelta = ACCESS_CACHE_TTL, max_entries: int = ACCESS_CACHE_MAX_ENTRIES
    ) -> None:
        self._ttl = ttl
        self._max_entries = max_entries
        self._entries: dict[str, CachedAccess] = {}
        # Moves on at every eviction. A lookup reads it before querying the database and stores
        # its answer only if it has not moved: otherwise a session may have been revoked after
        # the query read it as live.
        self.generation = 0

    def get(self, token: str, now: datetime) -> CachedAccess | None:
        entry = self._entries.get(token)
        if entry is None:
            return None
        if not _NO_TIME <= now - entry.stored_at < self._ttl:  # not stale, clock not set back
            del self._entries[token]
            return None
        return entry

    def put(self, token: str, entry: CachedAccess, generation: int) -> None:
        if generation != self.generation:
            return
        self._entries.pop(token, None)
        if len(self._entries) >= self._max_entries:
            # Entries share one TTL, so the first inserted is the first to go stale.
            del self._entries[next(iter(self._entries))]
        self._entries[token] = entry

    def forget_user(self, user_id: str) -> None:
        """Called once a change that ends every credential of the user has committed."""
        self.generation += 1
        stale = [t for t, e in self._entries.items() if e.claims.user_id == user_id]
        for token in stale:
            del self._entries[token]

    def forget_session(self, session_id: str) -> None:
        """Called once a session's revocation has committed."""
        self.generation += 1
        stale = [t for t, e in self._entries.items() if e.claims.session_id == session_id]
        for token in stale:
            del self._entries[token]

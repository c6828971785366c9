"""Access tokens (JWT), and the opaque refresh and API tokens that are stored only as hashes."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

import jwt

from buildbay.constant_time import secret_bytes
from buildbay.errors import NotAuthenticated

ACCESS_TOKEN_ALGORITHM = "HS256"
API_TOKEN_PREFIX = "bb_"
REFRESH_TOKEN_PREFIX = "bbr_"
API_TOKEN_DISPLAY_LENGTH = 11  # "bb_" and 8 characters: enough to recognise, useless to guess


def derive_key(master: bytes, purpose: str) -> bytes:
    """One secret, separate keys: a signature made for one purpose is worthless for another."""
    return hmac.new(master, purpose.encode(), hashlib.sha256).digest()


def hash_token(token: str) -> str:
    return hashlib.sha256(secret_bytes(token)).hexdigest()


def new_api_token() -> str:
    return API_TOKEN_PREFIX + secrets.token_urlsafe(32)  # 256 bits


def new_refresh_token() -> str:
    return REFRESH_TOKEN_PREFIX + secrets.token_urlsafe(32)


@dataclass(frozen=True, slots=True)
class AccessClaims:
    user_id: str
    session_id: str
    token_id: str
    expires_at: datetime


class AccessTokenCodec:
    def __init__(self, master_key: bytes, lifetime: timedelta) -> None:
        self._key = derive_key(master_key, "access-token")
        self.lifetime = lifetime

    def issue(self, user_id: str, session_id: str, now: datetime) -> str:
        claims = {
            "sub": user_id,
            "sid": session_id,
            "jti": secrets.token_urlsafe(12),
            "typ": "access",
            "iat": int(now.timestamp()),
            "exp": int((now + self.lifetime).timestamp()),
        }
        return jwt.encode(claims, self._key, algorithm=ACCESS_TOKEN_ALGORITHM)

    def decode(self, token: str, now: datetime) -> AccessClaims:
        try:
            # Expiry is checked below against the injected clock, not the wall clock; `iat` is
            # not checked at all (PyJWT would refuse a token whose issuer's clock runs ahead).
            claims = jwt.decode(
                token,
                self._key,
                algorithms=[ACCESS_TOKEN_ALGORITHM],
                options={
                    "verify_exp": False,
                    "verify_iat": False,
                    "require": ["exp", "sub", "sid", "jti", "typ"],
                },
            )
        except jwt.PyJWTError as exc:
            raise NotAuthenticated("The access token is invalid", code="invalid_token") from exc
        if claims.get("typ") != "access" or not all(
            isinstance(claims[k], str) for k in ("sub", "sid", "jti")
        ):
            raise NotAuthenticated("The access token is invalid", code="invalid_token")
        exp = claims["exp"]
        if not isinstance(exp, int):
            raise _expired()
        access = AccessClaims(
            user_id=claims["sub"],
            session_id=claims["sid"],
            token_id=claims["jti"],
            expires_at=datetime.fromtimestamp(exp, tz=now.tzinfo),
        )
        ensure_unexpired(access, now)
        return access


def ensure_unexpired(claims: AccessClaims, now: datetime) -> None:
    """The expiry check of `decode`, for claims decoded earlier (see auth/cache.py)."""
    if claims.expires_at <= now:
        raise _expired()


def _expired() -> NotAuthenticated:
    return NotAuthenticated("The access token has expired", code="token_expired")

"""Checking a CI's OpenID Connect ID token before it is exchanged (publishers/service.py).

What is said when a token is refused, and why it says no more: the checks before the signature
(a JWT at all, an allowed algorithm, an issuer some application trusts) tell only what the
caller's own token shows; once the signature verifies, the caller holds a genuine token, and the
refusals name the token's own claims (its expiry, its age, its subject and audience) but never
what a publisher expects. A publisher's pattern or audience is never told: an attacker with a
genuine token of a public issuer (anyone can get one from their own GitHub repository) learns
no more than "no publisher here takes this token".
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import jwt

from buildbay.errors import NotAuthenticated
from buildbay.publishers.keys import ALGORITHMS, IssuerKeys
from buildbay.text import BIDI_CLASS, CONTROL_CLASS

MAX_AGE = timedelta(minutes=5)  # of `iat`: an ID token is exchanged as soon as it is made
LEEWAY = timedelta(seconds=60)  # clocks differ: `iat`/`nbf` this far ahead still pass
MAX_JTI = 200
# No CI names a repository, branch or environment (nor an issuer its URL) with a control or
# bidirectional character, or half of a UTF-16 surrogate pair: an `iss` or `sub` holding one is
# refused, a `jti` is not taken as the key, so that a pattern's `*` never stands for one and
# none reaches the database (PostgreSQL refuses NUL in text, and no driver encodes a lone
# surrogate: a 500).
_UNSHOWABLE = re.compile(f"[{CONTROL_CLASS}{BIDI_CLASS}\ud800-\udfff]")


@dataclass(frozen=True, slots=True)
class IdToken:
    """An ID token whose signature, expiry and age were checked."""

    issuer: str
    subject: str
    audiences: tuple[str, ...]
    expires_at: datetime
    replay_key: str  # its `jti`, or `sha256:<hash of the token>` without one


def unverified_issuer(token: str) -> tuple[str, str | None, str]:
    """The token's `iss`, `kid` and `alg`, read before anything is verified (to find the keys
    to verify it with): 401 for what is not a JWT signed with an allowed algorithm."""
    try:
        header = jwt.get_unverified_header(token)
        claims = jwt.decode(token, options={"verify_signature": False})
    except jwt.PyJWTError:
        raise _invalid("The token is not a JWT (an OpenID Connect ID token)") from None
    alg, kid, issuer = header.get("alg"), header.get("kid"), claims.get("iss")
    if alg not in ALGORITHMS:
        raise _invalid(
            f"The token is signed with {str(alg)[:20]!r}; only {' and '.join(ALGORITHMS)} are "
            "accepted"
        )
    if not isinstance(issuer, str) or not issuer:
        raise _invalid("The token has no issuer (`iss`)")
    if _UNSHOWABLE.search(issuer):  # no issuer's URL has one; nor may it reach a query
        raise _invalid("The token's issuer (`iss`) holds a control character or is not UTF-8")
    if kid is not None and not isinstance(kid, str):
        raise _invalid("The token's `kid` is not a string")
    return issuer, kid, alg


async def verified(
    token: str, issuer: str, kid: str | None, alg: str, keys: IssuerKeys, now: datetime
) -> IdToken:
    """The token, once its issuer's key verifies its signature and its expiry and age pass
    (against the server's clock); 401 otherwise."""
    key = await keys.key_for(issuer, kid, alg)
    if key is None:
        raise _invalid("The token's signing key is not among its issuer's published keys (JWKS)")
    try:
        claims = _decoded(token, key, alg)
    except jwt.InvalidSignatureError:
        # The issuer may have rotated its key under the same (or no) `kid`: read its keys
        # again, once (IssuerKeys' floor), and try the key found then.
        fresh = await keys.refreshed_key(issuer, kid, alg)
        if fresh is None:
            raise _invalid("The token's signature does not verify with its issuer's key") from None
        try:
            claims = _decoded(token, fresh, alg)
        except jwt.InvalidSignatureError:
            raise _invalid("The token's signature does not verify with its issuer's key") from None
    subject, audience = claims["sub"], claims["aud"]
    if claims["iss"] != issuer or not isinstance(subject, str) or not subject:
        raise _invalid("The token's `iss` or `sub` is not a string")
    if _UNSHOWABLE.search(subject):
        raise _invalid("The token's `sub` holds a control character or is not UTF-8")
    # RFC 7519 4.1.3: a string or an array of strings; anything else holds no audience.
    audiences = (
        (audience,) if isinstance(audience, str)
        else tuple(audience) if isinstance(audience, list)
        else ()
    )  # fmt: skip
    if not audiences or not all(isinstance(a, str) for a in audiences):
        raise _invalid("The token's `aud` is neither a string nor a list of strings")
    expires_at, issued_at = _instant(claims["exp"], "exp"), _instant(claims["iat"], "iat")
    if expires_at <= now:
        raise NotAuthenticated(
            f"The token expired at {_iso(expires_at)} (the server's time is {_iso(now)})",
            code="token_expired",
        )
    if issued_at > now + LEEWAY or (
        "nbf" in claims and _instant(claims["nbf"], "nbf") > now + LEEWAY
    ):
        raise NotAuthenticated(
            f"The token is issued for a time to come ({_iso(issued_at)}; the server's time is "
            f"{_iso(now)}): check the clocks",
            code="token_not_yet_valid",
        )
    if issued_at < now - MAX_AGE:
        raise NotAuthenticated(
            f"The token was issued at {_iso(issued_at)}, more than 5 minutes ago: ask the CI "
            "for a new one just before the exchange",
            code="token_too_old",
        )
    jti = claims.get("jti")
    replay_key = (
        jti
        if isinstance(jti, str) and 0 < len(jti) <= MAX_JTI and not _UNSHOWABLE.search(jti)
        else "sha256:" + hashlib.sha256(token.encode()).hexdigest()
    )
    return IdToken(issuer, subject, audiences, expires_at, replay_key)


def _decoded(token: str, key: jwt.PyJWK, alg: str) -> dict[str, Any]:
    """The token's claims once `key` verifies its signature (InvalidSignatureError if not);
    401 for a token that lacks a claim every ID token has."""
    try:
        claims: dict[str, Any] = jwt.decode(
            token,
            key.key,
            algorithms=[alg],
            # Times are checked by `verified` against the server's clock (an injected one in
            # tests); the audience against each publisher's.
            options={
                "verify_exp": False, "verify_iat": False, "verify_nbf": False,
                "verify_aud": False, "verify_iss": False,
                "require": ["iss", "sub", "aud", "exp", "iat"],
            },
        )  # fmt: skip
    except jwt.InvalidSignatureError:
        raise
    except jwt.PyJWTError:
        raise _invalid(
            "The token lacks a claim an ID token has (iss, sub, aud, exp, iat)"
        ) from None
    return claims


def _instant(value: Any, claim: str) -> datetime:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _invalid(f"The token's `{claim}` is not a number of seconds")
    try:
        return datetime.fromtimestamp(value, tz=UTC)
    except (OverflowError, OSError, ValueError):
        raise _invalid(f"The token's `{claim}` is out of range") from None


def _iso(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _invalid(detail: str) -> NotAuthenticated:
    return NotAuthenticated(detail, code="invalid_id_token")

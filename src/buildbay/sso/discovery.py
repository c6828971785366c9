"""An OpenID provider's published facts, fetched and cached: its discovery document
(`{issuer}/.well-known/openid-configuration`) and its signing keys (the document's `jwks_uri`).

Used by the console's sign-in (sso/provider.py), one `ProviderDirectory` for the configured
issuer. The CI issuers of trusted publishing are read by publishers/keys.py instead (PyJWT,
through the webhooks' address guard, since anyone's issuer may be named there):

    directory = ProviderDirectory(issuer, http, clock)
    metadata = await directory.metadata()          # cached for METADATA_TTL, then refreshed
    claims = await directory.verified_jwt(token, algorithms)  # signature only: claims are yours

Key rotation: a token signed with a key id (`kid`) the cached key set lacks (or, naming no kid,
whose signature fails: a provider with one unnamed key) makes one refetch of the key set, at
most once per REFETCH_FLOOR whatever the token: a stream of tokens naming made-up kids cannot
make us hammer the provider. A provider that cannot be reached gives
`ProviderUnavailable`; what it answers that is not a provider's document, `ProviderMisbehaves`.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import httpx
from joserfc import jws, jwt
from joserfc.errors import BadSignatureError, InvalidKeyIdError, JoseError
from joserfc.jwk import KeySet

from buildbay.clock import Clock

METADATA_TTL = 3600.0  # seconds a discovery document is used before it is fetched again
JWKS_TTL = 3600.0  # ... and a key set, when no unknown kid asked for it sooner
REFETCH_FLOOR = 60.0  # at least this long between two fetches of the key set
MAX_DOCUMENT_BYTES = 256 * 1024


class ProviderUnavailable(Exception):
    """The provider could not be reached, or answered with an error status."""


class ProviderMisbehaves(Exception):
    """The provider answered something that is not what OpenID Connect says it answers."""


class TokenRefused(Exception):
    """A token whose signature does not verify against the provider's keys."""


@dataclass(frozen=True, slots=True)
class ProviderMetadata:
    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    jwks_uri: str
    signing_algorithms: tuple[str, ...]
    raw: dict[str, Any]


class ProviderDirectory:
    """The discovery document and key set of one issuer, cached in this process."""

    def __init__(self, issuer: str, http: httpx.AsyncClient, clock: Clock) -> None:
        self.issuer = issuer.rstrip("/")
        self._http = http
        self._clock = clock
        self._metadata: ProviderMetadata | None = None
        self._metadata_at = 0.0
        self._keys: KeySet | None = None
        self._keys_at = 0.0
        self._lock = asyncio.Lock()
        self.key_set_fetches = 0  # how many times the key set was fetched (tests, operations)

    async def metadata(self) -> ProviderMetadata:
        now = self._clock.monotonic()
        if self._metadata is None or now - self._metadata_at >= METADATA_TTL:
            async with self._lock:
                if self._metadata is None or now - self._metadata_at >= METADATA_TTL:
                    self._metadata = self._parse_metadata(
                        await self._get_json(f"{self.issuer}/.well-known/openid-configuration")
                    )
                    self._metadata_at = self._clock.monotonic()
        return self._metadata

    async def key_set(self, *, refresh: bool = False) -> KeySet:
        """The provider's keys; fetched again when stale, or when `refresh` asks and the last
        fetch is at least REFETCH_FLOOR old."""
        async with self._lock:
            age = self._clock.monotonic() - self._keys_at
            if self._keys is None or age >= JWKS_TTL or (refresh and age >= REFETCH_FLOOR):
                metadata = self._metadata or self._parse_metadata(
                    await self._get_json(f"{self.issuer}/.well-known/openid-configuration")
                )
                document = await self._get_json(metadata.jwks_uri)
                try:
                    self._keys = KeySet.import_key_set(document)  # type: ignore[arg-type]
                except (JoseError, ValueError, TypeError, KeyError):
                    raise ProviderMisbehaves(
                        "the provider's key set (jwks_uri) is not a JWKS"
                    ) from None
                self._keys_at = self._clock.monotonic()
                self.key_set_fetches += 1
            assert self._keys is not None
            return self._keys

    async def verified_jwt(self, token: str, algorithms: tuple[str, ...]) -> jwt.Token:
        """`token`'s header and claims once its signature verifies against the provider's
        keys. A token signed with a key they lack (its kid unknown; or, naming no kid, a
        signature that fails) makes one refetch of the key set, within REFETCH_FLOOR. The
        claims are not checked: the caller checks what its kind of token needs (iss, aud,
        exp, nonce, ...)."""
        refused = _decoded(token, await self.key_set(), algorithms)
        if isinstance(refused, jwt.Token):
            return refused
        if not refused.key_may_be_new:
            raise TokenRefused(refused.reason)
        fetches = self.key_set_fetches
        keys = await self.key_set(refresh=True)
        if self.key_set_fetches == fetches:  # within the floor: nothing new to try
            raise TokenRefused(refused.reason)
        again = _decoded(token, keys, algorithms)
        if isinstance(again, jwt.Token):
            return again
        raise TokenRefused(again.reason)

    async def _get_json(self, url: str) -> dict[str, Any]:
        try:
            response = await self._http.get(url, headers={"Accept": "application/json"})
        except httpx.HTTPError as exc:
            raise ProviderUnavailable(
                f"{url} could not be reached ({type(exc).__name__})"
            ) from None
        if response.status_code != 200:
            raise ProviderUnavailable(f"{url} answered {response.status_code}")
        if len(response.content) > MAX_DOCUMENT_BYTES:
            raise ProviderMisbehaves(f"{url} answered more than {MAX_DOCUMENT_BYTES} bytes")
        try:
            document = response.json()
        except ValueError:
            raise ProviderMisbehaves(f"{url} did not answer JSON") from None
        if not isinstance(document, dict):
            raise ProviderMisbehaves(f"{url} did not answer a JSON object")
        return document

    def _parse_metadata(self, document: dict[str, Any]) -> ProviderMetadata:
        # OpenID Connect Discovery 1.0, section 4.3: the document's issuer is exactly ours.
        if str(document.get("issuer", "")).rstrip("/") != self.issuer:
            raise ProviderMisbehaves(
                "the discovery document names another issuer than BUILDBAY_OIDC_ISSUER"
            )
        fields = {}
        for name in ("authorization_endpoint", "token_endpoint", "jwks_uri"):
            value = document.get(name)
            if not isinstance(value, str) or not value.startswith(("https://", "http://")):
                raise ProviderMisbehaves(f"the discovery document has no {name}")
            fields[name] = value
        algorithms = document.get("id_token_signing_alg_values_supported") or ["RS256"]
        signing = tuple(a for a in algorithms if isinstance(a, str) and a in ALLOWED_ALGORITHMS)
        return ProviderMetadata(
            issuer=self.issuer,
            authorization_endpoint=fields["authorization_endpoint"],
            token_endpoint=fields["token_endpoint"],
            jwks_uri=fields["jwks_uri"],
            signing_algorithms=signing or ("RS256",),
            raw=document,
        )


# Asymmetric signatures only: never `none`, never an HMAC keyed with something public.
ALLOWED_ALGORITHMS = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
)


@dataclass(frozen=True, slots=True)
class _Refusal:
    reason: str
    key_may_be_new: bool  # the provider may have rotated its keys since we fetched them


def _decoded(token: str, keys: KeySet, algorithms: tuple[str, ...]) -> jwt.Token | _Refusal:
    try:
        return jwt.decode(token, keys, algorithms=list(algorithms))
    except InvalidKeyIdError:
        return _Refusal("the token is signed with a key the provider does not publish", True)
    except BadSignatureError:
        return _Refusal("the token's signature does not verify", _kid_of(token) is None)
    except JoseError as exc:
        return _Refusal(_jose_reason(exc), False)
    except ValueError:
        return _Refusal("the token is not a signed JWT", False)


def _kid_of(token: str) -> str | None:
    try:
        header = jws.extract_compact(token.encode()).headers()
    except (JoseError, ValueError):  # a token we cannot read has no kid to look for
        return None
    kid = header.get("kid")
    return kid if isinstance(kid, str) else None


def _jose_reason(exc: JoseError) -> str:
    return exc.description or exc.error or type(exc).__name__

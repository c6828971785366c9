"""The relying party's side of the authorization code flow (OpenID Connect Core 1.0, 3.1) with
PKCE (RFC 7636, S256), through Authlib: the authorization request, the code's exchange at the
token endpoint, and the ID token's validation (signature against the provider's JWKS, `iss`,
`aud`, `azp`, `exp`, `iat`, `nonce`).

The flow's secrets (state, nonce, PKCE verifier) are made here and kept by the caller (the
console keeps them in a signed cookie of the browser that started the flow, console/sso.py).
"""

from __future__ import annotations

import secrets
import warnings
from dataclasses import dataclass
from typing import Any

import httpx
from authlib.deprecate import AuthlibDeprecationWarning  # type: ignore[import-untyped]
from joserfc.errors import JoseError
from joserfc.jwt import JWTClaimsRegistry

from buildbay.clock import Clock
from buildbay.config import ConfigurationError, Settings
from buildbay.distribution.join_links import domain_of_address, normal_domain
from buildbay.sso.discovery import (
    ProviderDirectory,
    ProviderMisbehaves,
    ProviderUnavailable,
    TokenRefused,
)
from buildbay.text import normal_email_text

with warnings.catch_warnings():
    # Authlib 1.9 says it would rather run on `httpx2` (a fork) when that is installed; it
    # runs on httpx, which the rest of Buildbay uses, as before.
    warnings.filterwarnings(
        "ignore", "The httpx module is deprecated", category=AuthlibDeprecationWarning
    )
    from authlib.integrations.httpx_client import (  # type: ignore[import-untyped]
        AsyncOAuth2Client,
        OAuthError,  # as the integration exports it (its __all__)
    )

HTTP_TIMEOUT = httpx.Timeout(10.0)
CLOCK_SKEW_SECONDS = 120  # leeway on exp and iat: the provider's clock and ours differ a little


class SignInFailed(Exception):
    """A sign-in through the provider that cannot go on. `reason` is a sentence for the person;
    `code` a stable name for the audit log."""

    def __init__(self, reason: str, code: str, why: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.code = code
        self.why = why  # what the audit log's details say beside the code (never a secret)


@dataclass(frozen=True, slots=True)
class FlowSecrets:
    """What the browser that starts a sign-in keeps until the provider sends it back."""

    state: str
    nonce: str
    code_verifier: str

    @classmethod
    def new(cls) -> FlowSecrets:
        # RFC 7636 4.1: a verifier of 43 to 128 unreserved characters (48 bytes give 64).
        return cls(secrets.token_urlsafe(32), secrets.token_urlsafe(32), secrets.token_urlsafe(48))


@dataclass(frozen=True, slots=True)
class SsoConfig:
    """BUILDBAY_OIDC_* as the flow uses them."""

    issuer: str
    client_id: str
    client_secret: str | None
    scopes: str
    allowed_domains: frozenset[str]  # normalised (NFKC, IDNA); empty: any
    groups_claim: str | None
    name: str

    @classmethod
    def of(cls, settings: Settings) -> SsoConfig | None:
        if not settings.oidc_enabled:
            return None
        domains = set()
        for given in settings.oidc_allowed_domain_list:
            domain = normal_domain(given)
            if domain is None:
                raise ConfigurationError(
                    f"BUILDBAY_OIDC_ALLOWED_DOMAINS: {given!r} is not a domain"
                )
            domains.add(domain)
        assert settings.oidc_client_id is not None
        secret = settings.oidc_client_secret
        return cls(
            issuer=settings.oidc_issuer_url,
            client_id=settings.oidc_client_id,
            client_secret=(secret.get_secret_value() or None) if secret else None,
            scopes=" ".join(settings.oidc_scopes.split()),
            allowed_domains=frozenset(domains),
            groups_claim=settings.oidc_groups_claim,
            name=settings.oidc_button_name,
        )

    def domain_allowed(self, email: str) -> bool:
        if not self.allowed_domains:
            return True
        return domain_of_address(normal_email_text(email)) in self.allowed_domains


class SsoProvider:
    """The configured identity provider, as this server signs people in through it."""

    def __init__(self, config: SsoConfig, clock: Clock) -> None:
        self.config = config
        self._clock = clock
        self._http = httpx.AsyncClient(timeout=HTTP_TIMEOUT, follow_redirects=False)
        self.directory = ProviderDirectory(config.issuer, self._http, clock)

    async def aclose(self) -> None:
        await self._http.aclose()

    def _client(self, redirect_uri: str) -> AsyncOAuth2Client:
        config = self.config
        return AsyncOAuth2Client(
            client_id=config.client_id,
            client_secret=config.client_secret,
            scope=config.scopes,
            redirect_uri=redirect_uri,
            code_challenge_method="S256",
            token_endpoint_auth_method="client_secret_basic" if config.client_secret else "none",
            timeout=HTTP_TIMEOUT,
        )

    async def authorization_url(self, redirect_uri: str, flow: FlowSecrets) -> str:
        """Where the browser goes to sign in at the provider."""
        metadata = await self._metadata()
        async with self._client(redirect_uri) as client:
            url, _ = client.create_authorization_url(
                metadata.authorization_endpoint,
                state=flow.state,
                nonce=flow.nonce,
                code_verifier=flow.code_verifier,
            )
        return str(url)

    async def identity(self, code: str, redirect_uri: str, flow: FlowSecrets) -> dict[str, Any]:
        """The ID token's claims for the authorization `code` the provider sent back, once the
        token is proven the provider's, for us, for this flow."""
        metadata = await self._metadata()
        async with self._client(redirect_uri) as client:
            try:
                token = await client.fetch_token(
                    metadata.token_endpoint, code=code, code_verifier=flow.code_verifier
                )
            except OAuthError as exc:
                raise SignInFailed(
                    f"{self.config.name} refused to complete the sign-in ({exc.error}). Try again.",
                    "token_refused",
                ) from None
            except (httpx.HTTPError, ValueError):
                raise _unreachable(self.config.name) from None
        id_token = token.get("id_token")
        if not isinstance(id_token, str):
            raise SignInFailed(
                f"{self.config.name} answered without an ID token: is the openid scope "
                "allowed for this client?",
                "no_id_token",
            )
        return await self.validated_claims(id_token, flow.nonce)

    async def validated_claims(self, id_token: str, nonce: str) -> dict[str, Any]:
        """The claims of `id_token` once its signature (the provider's JWKS, fetched again
        once for a key it lacks), issuer, audience, authorized party, expiry, issue time and
        nonce are right; SignInFailed otherwise."""
        metadata = await self._metadata()
        try:
            token = await self.directory.verified_jwt(id_token, metadata.signing_algorithms)
        except TokenRefused as exc:
            raise _bad_token(self.config.name, str(exc)) from None
        except (ProviderUnavailable, ProviderMisbehaves):
            raise _unreachable(self.config.name) from None
        claims = token.claims
        registry = JWTClaimsRegistry(
            now=int(self._clock.now().timestamp()),
            leeway=CLOCK_SKEW_SECONDS,
            iss={"essential": True, "value": self.config.issuer},
            aud={"essential": True, "value": self.config.client_id},
            sub={"essential": True},
            exp={"essential": True},
            iat={"essential": True},
            nonce={"essential": True, "value": nonce},
        )
        try:
            registry.validate(claims)
        except JoseError as exc:
            raise _bad_token(self.config.name, f"{exc.error}: {exc.description or ''}") from None
        audience = claims["aud"]
        # Core 1.0, 3.1.3.7: with several audiences, azp must be there; when there, ours.
        several = isinstance(audience, list) and len(audience) > 1
        if (several or "azp" in claims) and claims.get("azp") != self.config.client_id:
            raise _bad_token(self.config.name, "azp is another client")
        return claims

    async def _metadata(self) -> Any:
        try:
            return await self.directory.metadata()
        except (ProviderUnavailable, ProviderMisbehaves):
            raise _unreachable(self.config.name) from None


def _unreachable(name: str) -> SignInFailed:
    return SignInFailed(
        f"{name} cannot be reached right now, or answered something unexpected. Try again in "
        "a moment; if it goes on, tell the operator of this server.",
        "provider_unavailable",
    )


def _bad_token(name: str, why: str) -> SignInFailed:
    # `why` goes to the audit log's details, never to the page: the person can do nothing with
    # it, and it tells an attacker which check stopped them.
    return SignInFailed(
        f"The answer from {name} could not be verified, so you are not signed in. Start again "
        "from the sign-in page.",
        "invalid_id_token",
        why[:200],
    )

"""ID tokens from the real OpenID Connect provider (tests/oidc_provider.py), got as a CI job gets
one: the authorization code flow with `client_id` set to the audience wanted, signed in as the
subject wanted (the provider's ID token has `aud` = client_id and `sub` = who signed in)."""

from __future__ import annotations

import secrets
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx

from tests.oidc_provider import OidcProvider

REDIRECT_URI = "http://127.0.0.1:9/callback"
GITHUB_SUBJECT = "repo:acme/shop:ref:refs/heads/main"


def id_token(
    provider: OidcProvider, subject: str = GITHUB_SUBJECT, audience: str = "buildbay"
) -> str:
    query = urlencode({
        "client_id": audience, "redirect_uri": REDIRECT_URI, "response_type": "code",
        "scope": "openid", "state": secrets.token_urlsafe(8), "nonce": secrets.token_urlsafe(8),
    })  # fmt: skip
    back = provider.authorize(f"{provider.issuer}/oauth2/authorize?{query}", subject)
    code = parse_qs(urlsplit(back).query)["code"][0]
    r = httpx.post(
        f"{provider.issuer}/oauth2/token",
        data={"grant_type": "authorization_code", "code": code, "redirect_uri": REDIRECT_URI,
              "client_id": audience, "client_secret": "any"},
        timeout=10,
    )  # fmt: skip
    assert r.status_code == 200, r.text
    token: str = r.json()["id_token"]
    return token


def signing_key_id(provider: OidcProvider) -> str:
    """The `kid` of the provider's signing key, as its JWKS publishes it."""
    kid: str = httpx.get(f"{provider.issuer}/jwks", timeout=10).json()["keys"][0]["kid"]
    return kid

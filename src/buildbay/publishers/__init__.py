"""Trusted publishing (issue 41): an application trusts a CI identity (an OpenID Connect issuer,
a subject pattern, an audience), and a CI job of that identity exchanges its ID token for a
short-lived upload-only token (`POST /api/auth/oidc-exchange`): no stored secret in CI."""

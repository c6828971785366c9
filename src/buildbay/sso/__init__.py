"""Sign-in with the company's identity provider (OpenID Connect) and what it decides: accounts
made or linked at a first sign-in, and project memberships from the provider's groups."""

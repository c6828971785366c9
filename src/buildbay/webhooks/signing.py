"""Standard Webhooks signatures (standard-webhooks, spec/standard-webhooks.md): secrets are
`whsec_` + base64 of random bytes; a message is signed as HMAC-SHA256 of
`{webhook-id}.{webhook-timestamp}.{body}` with the secret's bytes, sent as `v1,<base64>`."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

SECRET_PREFIX = "whsec_"
SECRET_BYTES = 32  # the spec asks for 24 to 64


def new_secret() -> str:
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode()


def signature(secret: str, message_id: str, timestamp: int, body: str) -> str:
    """`v1,<base64 HMAC-SHA256>` of the message with `secret` (`whsec_...`)."""
    key = base64.b64decode(secret.removeprefix(SECRET_PREFIX))
    signed = f"{message_id}.{timestamp}.{body}".encode()
    digest = hmac.new(key, signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def signature_header(secrets_: list[str], message_id: str, timestamp: int, body: str) -> str:
    """The `webhook-signature` value: one signature per secret, space-separated (a rotation's
    new and previous secrets both sign for a while, as the spec allows)."""
    return " ".join(signature(secret, message_id, timestamp, body) for secret in secrets_)

"""Our signatures are the reference library's, byte for byte (and the receiver tests verify
them with it end to end)."""

from __future__ import annotations

import base64
from datetime import UTC, datetime

from standardwebhooks.webhooks import Webhook

from buildbay.webhooks.signing import SECRET_PREFIX, new_secret, signature, signature_header


def test_a_signature_is_the_reference_librarys() -> None:
    secret = new_secret()
    body = '{"type":"webhook.test","data":{"ünïcode":"✓"}}'
    ours = signature(secret, "msg_01", 1795692131, body)
    theirs = Webhook(secret).sign("msg_01", datetime.fromtimestamp(1795692131, UTC), body)
    assert ours == theirs


def test_a_rotation_header_carries_one_signature_per_secret() -> None:
    old, new = new_secret(), new_secret()
    header = signature_header([new, old], "msg_01", 1795692131, "{}")
    assert header.split(" ") == [
        signature(new, "msg_01", 1795692131, "{}"),
        signature(old, "msg_01", 1795692131, "{}"),
    ]


def test_secrets_are_whsec_and_32_random_bytes() -> None:
    secrets = {new_secret() for _ in range(20)}
    assert len(secrets) == 20
    for secret in secrets:
        assert secret.startswith(SECRET_PREFIX)
        assert len(base64.b64decode(secret.removeprefix(SECRET_PREFIX))) == 32

"""What no response may carry, checked on every response a test's client receives.

A `LeakGuard` hooks into an httpx client (the `no_leaks` fixture of tests/conftest.py) and fails
the request that leaks, at the point it happens:

- a password hash (any argon2 encoding), or the stored hash of a token the client was given;
- a password the client sent in a request body;
- a secret shown a second time: an access, refresh or API token appears in the response that
  issues it and never again (the API token's secret is shown once, at creation);
- the server's secret key, or a key derived from it;
- a stack trace, SQL or a driver's error, or a path of the server's disk.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

import buildbay
from buildbay.auth.tokens import derive_key, hash_token
from buildbay.config import Settings

# What an exception, a traceback or a database error looks like when it escapes.
INTERNALS = re.compile(
    r"Traceback \(most recent call last\)"
    r'|File "[^"]+", line \d+'
    r"|\[SQL: "
    r"|sqlalchemy\.(?:exc|orm|engine)"
    r"|asyncpg\.exceptions"
    r"|sqlite3\.\w*Error"
    r"|\$argon2(?:id|i|d)\$"
)
# Response fields that hand the client a secret (TokenResponse, CreatedApiToken).
SECRET_FIELDS = ("access_token", "refresh_token", "token")
KEY_PURPOSES = ("access-token", "storage-url", "install-link", "console-csrf")
MIN_PASSWORD_LENGTH = 8


class Leak(AssertionError):
    pass


class LeakGuard:
    def __init__(self, settings: Settings) -> None:
        key = settings.signing_key
        # text that must never appear -> what it is
        self.forbidden: dict[str, str] = {key.decode(): "the server's secret key"}
        for purpose in KEY_PURPOSES:
            derived = derive_key(key, purpose)
            self.forbidden[derived.hex()] = f"the {purpose} key"
            self.forbidden[base64.urlsafe_b64encode(derived).rstrip(b"=").decode()] = (
                f"the {purpose} key"
            )
        self.forbidden[str(settings.data_dir.resolve())] = "the server's data directory"
        self.forbidden[str(Path(buildbay.__file__).resolve().parent)] = "the server's source"
        self.issued: dict[str, str] = {}  # secret -> the request that issued it
        self.responses = 0

    def install(self, client: httpx.AsyncClient) -> None:
        client.event_hooks["request"].append(self.on_request)
        client.event_hooks["response"].append(self.on_response)

    async def on_request(self, request: httpx.Request) -> None:
        try:
            body = json.loads(request.content) if request.content else None
        except (httpx.RequestNotRead, ValueError, RecursionError):
            return  # a streamed or non-JSON body: no password in it to remember
        for field, value in _fields(body):
            is_password = "password" in field.lower() and isinstance(value, str)
            if is_password and len(value) >= MIN_PASSWORD_LENGTH:
                self.forbidden[value] = f"a password sent as {field}"

    async def on_response(self, response: httpx.Response) -> None:
        await response.aread()
        self.responses += 1
        where = f"{response.request.method} {response.request.url.path} -> {response.status_code}"
        headers = "\n".join(f"{k}: {v}" for k, v in response.headers.multi_items())
        # latin-1 maps every byte to one character: secrets, which are ASCII, are found as they
        # are, in any body, a binary one included.
        seen = headers + "\n" + response.content.decode("latin-1")
        for text, what in self.forbidden.items():
            if text in seen:
                raise Leak(f"{where} contains {what}:\n{seen[:2000]}")
        for secret, origin in self.issued.items():
            if secret in seen:
                raise Leak(f"{where} shows again a secret that {origin} issued:\n{seen[:2000]}")
        if (found := INTERNALS.search(seen)) is not None:
            raise Leak(f"{where} contains {found.group(0)!r}:\n{seen[:2000]}")
        content_type = response.headers.get("content-type", "")
        if response.is_success and "ndjson" in content_type:  # an export: a document a line
            for line in response.text.splitlines():
                self._remember_secrets(json.loads(line), where)
        elif response.is_success and "json" in content_type:
            self._remember_secrets(response.json(), where)

    def _remember_secrets(self, body: Any, where: str) -> None:
        for field, value in _fields(body):
            if field in SECRET_FIELDS and isinstance(value, str) and value:
                self.issued[value] = where
                self.forbidden[hash_token(value)] = f"the stored hash of a token ({field})"


def _fields(body: Any) -> Iterator[tuple[str, Any]]:
    """Every (name, value) of a JSON document, nested ones included."""
    if isinstance(body, dict):
        for name, value in body.items():
            yield name, value
            yield from _fields(value)
    elif isinstance(body, list):
        for item in body:
            yield from _fields(item)

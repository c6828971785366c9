"""Argon2id password hashing, run in a worker thread so a login never blocks the event loop."""

from __future__ import annotations

import functools

import anyio.to_thread
from pwdlib import PasswordHash
from pwdlib.hashers.argon2 import Argon2Hasher

# RFC 9106's second recommended option (64 MiB, 3 passes, 4 lanes): above OWASP's minimum of
# 19 MiB, 2 passes, 1 lane.
ARGON2_TIME_COST = 3
ARGON2_MEMORY_KIB = 64 * 1024
ARGON2_PARALLELISM = 4

_hasher = PasswordHash(
    (
        Argon2Hasher(
            time_cost=ARGON2_TIME_COST,
            memory_cost=ARGON2_MEMORY_KIB,
            parallelism=ARGON2_PARALLELISM,
        ),
    )
)


@functools.cache
def _dummy_hash() -> str:
    """Compared against when the e-mail is unknown, so a failed login costs the same either way."""
    return _hasher.hash("buildbay-timing-equaliser")


async def hash_password(password: str) -> str:
    return await anyio.to_thread.run_sync(_hasher.hash, password)


# The password hash of an account made by a sign-in through the identity provider: no password
# matches it (sso/signin.py); the account may set one through a reset, where the server allows.
NO_PASSWORD = "!sso"


async def verify_password(password: str, password_hash: str | None) -> bool:
    if password_hash is None or password_hash == NO_PASSWORD:
        await anyio.to_thread.run_sync(_hasher.verify, password, _dummy_hash())
        return False
    return await anyio.to_thread.run_sync(_hasher.verify, password, password_hash)

"""Passwords are stored with argon2id at its real cost (the one module that pays for it)."""

from __future__ import annotations

import base64
import re

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import select

from buildbay.auth import passwords
from buildbay.auth.models import User
from tests.conftest import Api, assert_problem

# OWASP Password Storage Cheat Sheet, Argon2id: equally strong configurations, as (memory in
# KiB, iterations), each with parallelism 1. A hash meets the minimum if it has at least the
# memory and at least the iterations of one of them.
OWASP_ARGON2ID_MINIMUMS = [(47_104, 1), (19_456, 2), (12_288, 3), (9_216, 4), (7_168, 5)]
# RFC 9106 (Argon2), section 4: a 128-bit salt; the tag at least 128 bits (256 recommended).
MIN_SALT_BYTES = 16
MIN_TAG_BYTES = 16
PHC = re.compile(
    r"^\$(?P<variant>argon2(?:id|i|d))\$v=(?P<version>\d+)"
    r"\$m=(?P<m>\d+),t=(?P<t>\d+),p=(?P<p>\d+)\$(?P<salt>[A-Za-z0-9+/]+)\$(?P<tag>[A-Za-z0-9+/]+)$"
)


def b64_length(text: str) -> int:
    """Bytes encoded by PHC's unpadded base64."""
    return len(base64.b64decode(text + "=" * (-len(text) % 4)))


async def stored_hash(app: FastAPI, user_id: str) -> str:
    async with app.state.ctx.sessions() as db:
        stored = await db.scalar(select(User.password_hash).where(User.id == user_id))
    assert stored is not None
    return stored


@pytest.fixture
def fast_password_hashing() -> None:
    """Overrides the autouse fixture of tests/auth/conftest.py: here hashing is real."""


async def test_passwords_are_stored_as_argon2id_hashes_and_checked_at_login(
    api: Api, client: httpx.AsyncClient, app: FastAPI
) -> None:
    account = await api.register("ada@example.com", password="correct horse")

    stored = await stored_hash(app, account.user["id"])
    assert stored.startswith("$argon2id$")
    assert "correct horse" not in stored

    ok = await client.post(
        "/api/auth/login", json={"email": account.email, "password": "correct horse"}
    )
    assert ok.status_code == 200, ok.text
    wrong = await client.post(
        "/api/auth/login", json={"email": account.email, "password": "wrong horse"}
    )
    unknown = await client.post(
        "/api/auth/login", json={"email": "nobody@example.com", "password": "correct horse"}
    )
    wrong_body = assert_problem(wrong, 401, "invalid_credentials")
    unknown_body = assert_problem(unknown, 401, "invalid_credentials")
    assert wrong_body["detail"] == unknown_body["detail"]


async def test_the_stored_hash_meets_owasps_argon2id_minimum(api: Api, app: FastAPI) -> None:
    first = await api.register("ada@example.com", password="correct horse")
    second = await api.register("grace@example.com", password="correct horse")

    stored = [await stored_hash(app, a.user["id"]) for a in (first, second)]

    parsed = PHC.match(stored[0])
    assert parsed is not None
    assert parsed["variant"] == "argon2id"
    assert int(parsed["version"]) == 0x13  # Argon2 1.3, the RFC 9106 version
    memory, iterations, lanes = int(parsed["m"]), int(parsed["t"]), int(parsed["p"])
    assert lanes >= 1
    met = [(m, t) for m, t in OWASP_ARGON2ID_MINIMUMS if memory >= m and iterations >= t]
    assert met, f"m={memory} KiB, t={iterations} is below every OWASP configuration"
    assert b64_length(parsed["salt"]) >= MIN_SALT_BYTES
    assert b64_length(parsed["tag"]) >= MIN_TAG_BYTES
    # Every password gets a salt of its own: the same password is stored twice differently.
    other = PHC.match(stored[1])
    assert other is not None
    assert other["salt"] != parsed["salt"]
    assert other["tag"] != parsed["tag"]


async def test_an_unknown_e_mail_is_checked_against_a_hash_of_the_same_cost(
    api: Api, app: FastAPI
) -> None:
    account = await api.register("ada@example.com", password="correct horse")

    def cost(encoded: str) -> str:
        return encoded.split("$")[3]  # m=...,t=...,p=...

    assert cost(passwords._dummy_hash()) == cost(await stored_hash(app, account.user["id"]))

"""Passwords are stored with argon2id at its real cost (the one module that pays for it)."""

from __future__ import annotations

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import select

from buildbay.auth.models import User
from tests.conftest import Api, assert_problem


@pytest.fixture
def fast_password_hashing() -> None:
    """Overrides the autouse fixture of tests/auth/conftest.py: here hashing is real."""


async def test_passwords_are_stored_as_argon2id_hashes_and_checked_at_login(
    api: Api, client: httpx.AsyncClient, app: FastAPI
) -> None:
    account = await api.register("ada@example.com", password="correct horse")

    async with app.state.ctx.sessions() as db:
        stored = await db.scalar(select(User.password_hash).where(User.id == account.user["id"]))
    assert stored is not None
    assert stored.startswith("$argon2id$v=19$m=65536,t=3,p=4$")
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

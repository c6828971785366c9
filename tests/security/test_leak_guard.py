"""The leak guard (tests/leaks.py) that checks every response of the auth, builds, security and
authorization-matrix tests: it must catch each kind of leak, wherever in the response it is."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Response
from sqlalchemy import select

from buildbay.auth.models import User
from buildbay.auth.tokens import hash_token
from buildbay.config import Settings
from tests.conftest import Account
from tests.leaks import Leak, LeakGuard


async def password_hash_of(app: FastAPI, account: Account) -> str:
    async with app.state.ctx.sessions() as db:
        stored = await db.scalar(select(User.password_hash).where(User.id == account.user["id"]))
    assert stored is not None
    return stored


def serve(app: FastAPI, body: str, *, in_header: bool = False, binary: bool = False) -> None:
    """A test-only route that answers `body` (or puts it in a header, or in raw bytes)."""

    async def leaky() -> Response:
        if in_header:
            return Response("{}", media_type="application/json", headers={"X-Debug": body})
        if binary:
            return Response(b"\x00PK\x03" + body.encode() + b"\xff", media_type="application/zip")
        return Response(f'{{"debug": {body!r}}}'.replace("'", '"'), media_type="application/json")

    app.add_api_route("/test-only/leaky", leaky, methods=["GET"])


LEAKS: dict[str, Callable[[Account, dict[str, Any]], str]] = {
    "a password hash": lambda owner, s: s["password_hash"],
    "the hash of a refresh token": lambda owner, s: hash_token(owner.refresh_token),
    "a refresh token shown again": lambda owner, s: owner.refresh_token,
    "an access token shown again": lambda owner, s: owner.access_token,
    "an API token shown again": lambda owner, s: s["api_token"],
    "the hash of an API token": lambda owner, s: hash_token(s["api_token"]),
    "a password the client sent": lambda owner, s: owner.password,
    "the secret key": lambda owner, s: s["secret_key"],
    "a path of the data directory": lambda owner, s: f"{s['data_dir']}/buildbay.sqlite3",
    "a stack trace": lambda owner, s: 'Traceback (most recent call last):\n  File "x.py", line 1',
    "SQL": lambda owner, s: "(sqlite3.OperationalError) no such table [SQL: SELECT 1]",
}


@pytest.mark.parametrize("where", ["body", "header", "binary body"])
@pytest.mark.parametrize("leak", list(LEAKS))
async def test_the_guard_fails_the_request_that_leaks(
    app: FastAPI,
    client: httpx.AsyncClient,
    owner: Account,
    settings: Settings,
    no_leaks: LeakGuard,
    leak: str,
    where: str,
) -> None:
    r = await client.post("/api/account/api-tokens", json={"name": "CI"}, headers=owner.headers)
    assert r.status_code == 201, r.text
    secrets = {
        "password_hash": await password_hash_of(app, owner),
        "api_token": r.json()["token"],
        "secret_key": settings.signing_key.decode(),
        "data_dir": str(settings.data_dir.resolve()),
    }
    leaked = LEAKS[leak](owner, secrets)
    serve(app, leaked, in_header=where == "header", binary=where == "binary body")

    with pytest.raises(Leak):
        await client.get("/test-only/leaky")


async def test_the_guard_lets_a_clean_answer_through(
    app: FastAPI, client: httpx.AsyncClient, owner: Account, no_leaks: LeakGuard
) -> None:
    seen = no_leaks.responses
    serve(app, "nothing to see")

    r = await client.get("/test-only/leaky")

    assert r.json() == {"debug": "nothing to see"}
    assert no_leaks.responses == seen + 1

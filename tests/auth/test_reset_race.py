"""A password reset takes the account back from credentials made while it runs, too (issue 34).

Each test holds the reset's unit of work after its statements, before its commit (as a slow
password hash did, for up to two seconds), and sends the competing request meanwhile: it reads
its proof (the old password, a live session) before the reset commits and writes its credential
after the reset's revocations ran. On SQLite the reset holds the write lock, so that write waits
for the commit; on PostgreSQL it goes through at once, and the credential is even used (and
cached) before the reset commits. Whatever it made must not act once the reset has committed.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import select

from buildbay.auth.accounts import AccountService
from buildbay.auth.models import User
from buildbay.auth.password_reset import PasswordResets
from buildbay.db.engine import finish
from buildbay.deps import AppContext
from tests.conftest import BASE_URL, Account, Api, assert_problem
from tests.pools import when_written

CONFIRM = "/api/auth/password-reset/confirm"
NEW_PASSWORD = "the real owner's password"
GUARD = 30  # seconds: only so that a broken test fails instead of hanging, never for timing


class HeldReset:
    """Password resets that stop once their statements have run, before their commit, until
    `release`."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.reached = asyncio.Event()
        self.released = asyncio.Event()
        confirm = PasswordResets.confirm

        async def held(
            resets: PasswordResets, token: str, password: str, accounts: AccountService
        ) -> User:
            user = await confirm(resets, token, password, accounts)
            self.reached.set()
            await self.released.wait()
            return user

        monkeypatch.setattr(PasswordResets, "confirm", held)


async def reset_token_for(app: FastAPI, email: str) -> str:
    ctx: AppContext = app.state.ctx
    db = ctx.sessions()
    try:
        user = await db.scalar(select(User).where(User.email == email))
        assert user is not None
        token = await PasswordResets(db, ctx.clock.now()).issue(user)
    finally:
        await finish(db, ok=True)
    return token


async def race_a_reset(
    app: FastAPI,
    client: httpx.AsyncClient,
    monkeypatch: pytest.MonkeyPatch,
    email: str,
    competing: Callable[[], Awaitable[httpx.Response]],
    writes: str,
    while_held: Callable[[httpx.Response], Awaitable[None]] | None = None,
    competing_app: FastAPI | None = None,
) -> httpx.Response:
    """Run `competing` (on `competing_app`, by default `app`) while the reset of `email` is held:
    it starts once the reset's statements have run, and the reset commits once `competing` has
    begun its write (`writes`). On PostgreSQL `competing` finishes first, and `while_held` may
    then use what it made."""
    token = await reset_token_for(app, email)
    held = HeldReset(monkeypatch)
    written = when_written(competing_app or app, writes)
    reset = asyncio.create_task(
        client.post(CONFIRM, json={"token": token, "password": NEW_PASSWORD})
    )
    await asyncio.wait_for(held.reached.wait(), GUARD)
    attempt = asyncio.create_task(competing())
    await asyncio.wait_for(written.wait(), GUARD)
    if app.state.ctx.engine.dialect.name == "postgresql":
        answer = await asyncio.wait_for(attempt, GUARD)  # nothing of the reset's stops it here
        if while_held is not None:
            await while_held(answer)
    held.released.set()
    confirmed = await asyncio.wait_for(reset, GUARD)
    assert confirmed.status_code == 204, confirmed.text
    return await asyncio.wait_for(attempt, GUARD)


async def the_owner_is_back(api: Api, client: httpx.AsyncClient, email: str) -> None:
    """The owner's own login after the reset works, and makes tokens that work."""
    r = await client.post("/api/auth/login", json={"email": email, "password": NEW_PASSWORD})
    assert r.status_code == 200, r.text
    headers = {"Authorization": f"Bearer {r.json()['access_token']}"}
    me = await client.get("/api/auth/me", headers=headers)
    assert me.status_code == 200, me.text
    assert me.json()["email"] == email
    made = await client.post("/api/account/api-tokens", json={"name": "ci"}, headers=headers)
    assert made.status_code == 201, made.text
    token_headers = {"Authorization": f"Bearer {made.json()['token']}"}
    me = await client.get("/api/auth/me", headers=token_headers)
    assert me.status_code == 200, me.text
    assert me.json()["email"] == email


async def test_an_api_token_made_while_a_reset_runs_is_dead_after_it(
    app: FastAPI, client: httpx.AsyncClient, api: Api, owner: Account,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    async def make_token() -> httpx.Response:
        return await client.post(
            "/api/account/api-tokens", json={"name": "race"}, headers=owner.headers
        )

    async def use(made: httpx.Response) -> None:
        assert made.status_code == 201, made.text
        headers = {"Authorization": f"Bearer {made.json()['token']}"}
        assert (await client.get("/api/auth/me", headers=headers)).status_code == 200

    made = await race_a_reset(
        app, client, monkeypatch, owner.email, make_token, "INSERT INTO API_TOKENS", use
    )
    assert made.status_code == 201, made.text  # it began before the reset committed
    headers = {"Authorization": f"Bearer {made.json()['token']}"}
    assert_problem(await client.get("/api/auth/me", headers=headers), 401, "invalid_token")
    projects = await client.get("/api/projects", headers=headers)
    assert_problem(projects, 401, "invalid_token")
    await the_owner_is_back(api, client, owner.email)


async def test_a_login_with_the_old_password_while_a_reset_runs_is_dead_after_it(
    app: FastAPI, client: httpx.AsyncClient, api: Api, owner: Account,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    async def log_in() -> httpx.Response:
        return await client.post(
            "/api/auth/login", json={"email": owner.email, "password": owner.password}
        )

    async def use(login: httpx.Response) -> None:
        # Used, and so cached, before the reset commits: the cache must not serve it after.
        assert login.status_code == 200, login.text
        headers = {"Authorization": f"Bearer {login.json()['access_token']}"}
        assert (await client.get("/api/auth/me", headers=headers)).status_code == 200

    login = await race_a_reset(
        app, client, monkeypatch, owner.email, log_in, "INSERT INTO SESSIONS", use
    )
    assert login.status_code == 200, login.text  # the old password was right when it was read
    issued = login.json()
    headers = {"Authorization": f"Bearer {issued['access_token']}"}
    assert_problem(await client.get("/api/auth/me", headers=headers), 401, "token_revoked")
    refresh = await client.post(
        "/api/auth/refresh-token", json={"refresh_token": issued["refresh_token"]}
    )
    assert_problem(refresh, 401, "session_ended")
    await the_owner_is_back(api, client, owner.email)


async def test_a_login_used_while_a_reset_runs_is_not_served_from_a_cache_after_it(
    app: FastAPI, client: httpx.AsyncClient, api: Api, owner: Account,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """The account has no other session: the reset revokes none, yet the access token of the
    login made meanwhile, looked up and cached before the reset committed (PostgreSQL), must
    be looked up again after it, in this process and in the others (the user's mark)."""
    assert (await client.post("/api/auth/logout", headers=owner.headers)).status_code == 204

    async def log_in() -> httpx.Response:
        return await client.post(
            "/api/auth/login", json={"email": owner.email, "password": owner.password}
        )

    async def use(login: httpx.Response) -> None:
        headers = {"Authorization": f"Bearer {login.json()['access_token']}"}
        for _ in range(2):  # the second one from the cache
            assert (await client.get("/api/auth/me", headers=headers)).status_code == 200

    login = await race_a_reset(
        app, client, monkeypatch, owner.email, log_in, "INSERT INTO SESSIONS", use
    )
    assert login.status_code == 200, login.text
    headers = {"Authorization": f"Bearer {login.json()['access_token']}"}
    assert_problem(await client.get("/api/auth/me", headers=headers), 401, "token_revoked")
    await the_owner_is_back(api, client, owner.email)


async def test_with_redis_a_login_used_while_a_reset_runs_is_refused_by_another_s_cache(
    two_processes: list[tuple[FastAPI, httpx.AsyncClient]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """As above, with the reset in one process and the login and its uses in another: the
    reset, which revokes no session, must still give the user a new mark there."""
    (one_app, one), (two_app, two) = two_processes
    api = Api(one)
    owner = await api.register()
    assert (await one.post("/api/auth/logout", headers=owner.headers)).status_code == 204

    async def log_in() -> httpx.Response:
        return await two.post(
            "/api/auth/login", json={"email": owner.email, "password": owner.password}
        )

    async def use(login: httpx.Response) -> None:
        headers = {"Authorization": f"Bearer {login.json()['access_token']}"}
        for _ in range(2):  # the second one from the cache
            assert (await two.get("/api/auth/me", headers=headers)).status_code == 200

    login = await race_a_reset(
        one_app, one, monkeypatch, owner.email, log_in, "INSERT INTO SESSIONS", use, two_app
    )
    assert login.status_code == 200, login.text
    headers = {"Authorization": f"Bearer {login.json()['access_token']}"}
    assert_problem(await two.get("/api/auth/me", headers=headers), 401, "token_revoked")
    await the_owner_is_back(api, one, owner.email)


async def test_a_refresh_while_a_reset_runs_is_dead_after_it(
    app: FastAPI, client: httpx.AsyncClient, api: Api, owner: Account,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    async def refresh() -> httpx.Response:
        return await client.post(
            "/api/auth/refresh-token", json={"refresh_token": owner.refresh_token}
        )

    async def use(rotated: httpx.Response) -> None:
        assert rotated.status_code == 200, rotated.text
        headers = {"Authorization": f"Bearer {rotated.json()['access_token']}"}
        assert (await client.get("/api/auth/me", headers=headers)).status_code == 200

    rotated = await race_a_reset(
        app, client, monkeypatch, owner.email, refresh, "UPDATE REFRESH_TOKENS", use
    )
    assert rotated.status_code == 200, rotated.text
    issued = rotated.json()
    headers = {"Authorization": f"Bearer {issued['access_token']}"}
    assert_problem(await client.get("/api/auth/me", headers=headers), 401, "token_revoked")
    again = await client.post(
        "/api/auth/refresh-token", json={"refresh_token": issued["refresh_token"]}
    )
    assert_problem(again, 401, "session_ended")
    await the_owner_is_back(api, client, owner.email)


async def test_a_console_sign_in_while_a_reset_runs_is_dead_after_it(
    app: FastAPI, client: httpx.AsyncClient, api: Api, owner: Account,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as browser:
        page = await browser.get("/login")
        found = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert found, page.text[:300]
        form: dict[str, Any] = {
            "csrf": found.group(1), "email": owner.email, "password": owner.password,
        }  # fmt: skip

        async def sign_in() -> httpx.Response:
            return await browser.post("/login", data=form, headers={"Origin": BASE_URL})

        async def use(signed_in: httpx.Response) -> None:
            assert signed_in.status_code == 303, signed_in.text
            account = await browser.get("/account")
            assert account.status_code == 200, account.text
            assert owner.email in account.text

        signed_in = await race_a_reset(
            app, client, monkeypatch, owner.email, sign_in, "INSERT INTO SESSIONS", use
        )
        assert signed_in.status_code == 303, signed_in.text
        assert signed_in.headers["location"] == "/projects"
        assert browser.cookies.get("bb_session")  # the cookie it was given
        account = await browser.get("/account")
        assert account.status_code == 303, account.text  # not signed in: to the sign-in page
        assert account.headers["location"].startswith("/login")
        assert owner.email not in account.text
    await the_owner_is_back(api, client, owner.email)

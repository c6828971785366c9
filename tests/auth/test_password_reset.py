"""Password reset by mail: 202 whatever the e-mail, a single-use link of an hour to the account
that has it (read from a real SMTP server), and a new password that ends every session."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from fastapi import FastAPI
from pydantic import SecretStr
from sqlalchemy import func, select

from buildbay.clock import FrozenClock
from buildbay.config import Settings
from buildbay.db.engine import finish
from buildbay.deps import AppContext
from buildbay.jobs.models import Job
from tests.conftest import Account, Api, assert_problem
from tests.smtp import SmtpSink, smtp

__all__ = ["smtp"]

RESET = "/api/auth/password-reset"
CONFIRM = "/api/auth/password-reset/confirm"


@pytest.fixture
def settings(settings: Settings, smtp: SmtpSink) -> Settings:
    settings.smtp_url = SecretStr(smtp.url)
    return settings


def ctx_of(app: FastAPI) -> AppContext:
    ctx: AppContext = app.state.ctx
    return ctx


async def run_jobs(app: FastAPI) -> None:
    jobs = ctx_of(app).jobs
    assert jobs is not None
    await jobs.run_until_idle()


async def jobs_written(app: FastAPI) -> int:
    db = ctx_of(app).sessions()
    try:
        return int(await db.scalar(select(func.count()).select_from(Job)) or 0)
    finally:
        await finish(db, ok=True)


async def reset_token(client: httpx.AsyncClient, app: FastAPI, smtp: SmtpSink, email: str) -> str:
    """Ask for a reset of `email` and read the token from the mail that arrives."""
    await run_jobs(app)  # what was written before (a sign-up's verification mail) goes first
    before = len(smtp.messages())
    r = await client.post(RESET, json={"email": email})
    assert r.status_code == 202, r.text
    await run_jobs(app)
    received = smtp.messages()[before:]
    assert [m.recipients for m in received] == [[email]]
    link = received[0].link("http")
    assert link.startswith("http://testserver/reset-password?token=bbp_")
    [token] = parse_qs(urlsplit(link).query)["token"]
    return token


async def test_the_link_sets_a_new_password_and_ends_every_session_and_api_token(
    client: httpx.AsyncClient, app: FastAPI, smtp: SmtpSink, owner: Account, api: Api
) -> None:
    other_login = await api.login(owner)
    r = await client.post("/api/account/api-tokens", json={"name": "ci"}, headers=owner.headers)
    api_token = {"Authorization": f"Bearer {r.json()['token']}"}

    token = await reset_token(client, app, smtp, owner.email)
    mail = smtp.messages()[-1]
    assert mail.message["Subject"] == "Reset your Buildbay password"
    assert "within an hour" in mail.text
    assert "signs the account out everywhere" in mail.text
    assert "deletes all its API tokens" in " ".join(mail.text.split())
    r = await client.post(CONFIRM, json={"token": token, "password": "a brand new secret"})

    assert r.status_code == 204, r.text
    for session in (owner, other_login):
        r = await client.get("/api/auth/me", headers=session.headers)
        assert_problem(r, 401, "token_revoked")
        r = await client.post(
            "/api/auth/refresh-token", json={"refresh_token": session.refresh_token}
        )
        assert_problem(r, 401, "session_ended")
    r = await client.get("/api/auth/me", headers=api_token)
    assert_problem(r, 401, "invalid_token")
    r = await client.post(
        "/api/auth/login", json={"email": owner.email, "password": owner.password}
    )
    assert_problem(r, 401, "invalid_credentials")
    owner.password = "a brand new secret"
    await api.login(owner)


async def test_an_unknown_email_gets_the_same_answer_the_same_work_and_no_mail(
    client: httpx.AsyncClient, app: FastAPI, smtp: SmtpSink, owner: Account
) -> None:
    await run_jobs(app)  # the owner's sign-up mail
    signed_up = await jobs_written(app)
    r = await client.post(RESET, json={"email": "nobody@example.com"})
    assert (r.status_code, r.content) == (202, b"")
    assert await jobs_written(app) == signed_up + 1
    r = await client.post(RESET, json={"email": owner.email})
    assert (r.status_code, r.content) == (202, b"")
    assert await jobs_written(app) == signed_up + 2  # one each: the request does the same

    before = len(smtp.messages())
    await run_jobs(app)

    assert [m.recipients for m in smtp.messages()[before:]] == [[owner.email]]


async def test_a_link_works_once_and_for_an_hour_and_spends_the_users_other_links(
    client: httpx.AsyncClient, app: FastAPI, smtp: SmtpSink, owner: Account, clock: FrozenClock
) -> None:
    first = await reset_token(client, app, smtp, owner.email)
    second = await reset_token(client, app, smtp, owner.email)
    r = await client.post(CONFIRM, json={"token": second, "password": "password number 2"})
    assert r.status_code == 204

    for used in (second, first, "bbp_" + "x" * 43, "not even a token"):
        r = await client.post(CONFIRM, json={"token": used, "password": "password number 3"})
        problem = assert_problem(r, 422, "invalid_token")
        assert problem["errors"][0]["field"] == "token"

    late = await reset_token(client, app, smtp, owner.email)
    clock.advance(hours=1)
    r = await client.post(CONFIRM, json={"token": late, "password": "password number 4"})
    assert_problem(r, 422, "invalid_token")


async def test_a_refused_password_leaves_the_link_usable(
    client: httpx.AsyncClient, app: FastAPI, smtp: SmtpSink, owner: Account
) -> None:
    token = await reset_token(client, app, smtp, owner.email)

    r = await client.post(CONFIRM, json={"token": token, "password": "short"})
    assert_problem(r, 422, "validation_error")
    r = await client.post(CONFIRM, json={"token": token, "password": "long enough now"})
    assert r.status_code == 204


async def test_asking_is_throttled_per_email_and_per_ip(
    client: httpx.AsyncClient, app: FastAPI
) -> None:
    for _ in range(5):
        r = await client.post(RESET, json={"email": "carol@example.com"})
        assert r.status_code == 202

    r = await client.post(RESET, json={"email": "carol@example.com"})
    problem = assert_problem(r, 429, "reset_throttled")
    assert 1 <= int(r.headers["retry-after"]) <= 3600
    assert "wait" in problem["detail"]
    # 20 an hour from one address, the refused one included.
    for n in range(14):
        r = await client.post(RESET, json={"email": f"user{n}@example.com"})
        assert r.status_code == 202, n
    r = await client.post(RESET, json={"email": "someone-else@example.com"})
    assert_problem(r, 429, "reset_throttled")
    assert await jobs_written(app) == 19


@pytest.mark.parametrize(
    "body",
    [{}, {"email": "not an e-mail"}, {"email": "a@example.com", "extra": 1}, {"email": 5}],
)
async def test_a_request_that_is_not_an_email_is_refused(
    client: httpx.AsyncClient, app: FastAPI, body: dict[str, object]
) -> None:
    r = await client.post(RESET, json=body)
    assert_problem(r, 422, "validation_error")
    assert await jobs_written(app) == 0


async def test_the_reset_mail_names_nobody_until_the_address_is_proven(
    client: httpx.AsyncClient, app: FastAPI, smtp: SmtpSink
) -> None:
    """Anyone may ask for a reset mail to any address: an account signed up with a stranger's
    address and a lure for a name must not write that name to them."""
    lure = "Security team: your account is locked, visit evil.example/reset"
    r = await client.post("/api/auth/register", json={
        "email": "victim@example.com", "password": "correct horse", "name": lure,
    })  # fmt: skip
    assert r.status_code == 201, r.text

    token = await reset_token(client, app, smtp, "victim@example.com")

    mail = smtp.messages()[-1]
    assert mail.text.splitlines()[0] == "Hello,"
    assert "<p>Hello,</p>" in mail.html
    assert "evil.example" not in mail.text + mail.html
    # Once the address is proven (following the link proves it), the name is the owner's own.
    r = await client.post(f"{RESET}/confirm", json={"token": token, "password": "new horse 1"})
    assert r.status_code == 204, r.text
    r = await client.post(
        "/api/auth/login", json={"email": "victim@example.com", "password": "new horse 1"}
    )
    headers = {"Authorization": f"Bearer {r.json()['access_token']}"}
    r = await client.put("/api/auth/me", json={"name": "Vic"}, headers=headers)
    assert r.status_code == 200, r.text
    await reset_token(client, app, smtp, "victim@example.com")
    assert smtp.messages()[-1].text.splitlines()[0] == "Hello Vic,"

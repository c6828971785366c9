"""Changing the account's e-mail address (issue 36): asked for with the password, done when the
link mailed to the new address (a durable outbox mail, read here from a real SMTP server) is
followed; the old address is told. And signing out everywhere."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from fastapi import FastAPI
from pydantic import SecretStr

from buildbay.auth.models import EmailChange
from buildbay.clock import FrozenClock
from buildbay.config import Settings
from buildbay.db.engine import finish
from buildbay.deps import AppContext
from tests.conftest import Account, Api, assert_problem
from tests.smtp import Received, SmtpSink, smtp

__all__ = ["smtp"]
CHANGE = "/api/auth/email-change"
CONFIRM = "/api/auth/email-change/confirm"
ASKED = "Confirm your new e-mail address for Buildbay"
TOLD = "The e-mail address of your Buildbay account changed"


@pytest.fixture
def settings(settings: Settings, smtp: SmtpSink) -> Settings:
    settings.smtp_url = SecretStr(smtp.url)
    return settings


async def mails(app: FastAPI, smtp: SmtpSink, subject: str) -> list[Received]:
    """Run the outbox; the mails of `subject` that arrived."""
    ctx: AppContext = app.state.ctx
    assert ctx.jobs is not None
    await ctx.jobs.run_until_idle()
    return [m for m in smtp.messages() if m.message["Subject"] == subject]


def token_of(mail: Received) -> str:
    link = mail.link("http")
    assert link.startswith("http://testserver/confirm-email?token=bbc_"), link
    [token] = parse_qs(urlsplit(link).query)["token"]
    return token


async def me(client: httpx.AsyncClient, account: Account) -> dict[str, object]:
    r = await client.get("/api/auth/me", headers=account.headers)
    assert r.status_code == 200, r.text
    body: dict[str, object] = r.json()
    return body


async def test_the_address_changes_once_the_link_mailed_to_it_is_followed(
    app: FastAPI, client: httpx.AsyncClient, api: Api, smtp: SmtpSink
) -> None:
    ada = await api.register("ada@example.com")
    asked = {"newEmail": "Ada@Example.org", "password": ada.password}

    r = await client.post(CHANGE, json=asked, headers=ada.headers)

    assert (r.status_code, r.content) == (202, b"")
    mine = await me(client, ada)
    assert (mine["email"], mine["pendingEmail"]) == ("ada@example.com", "ada@example.org")
    [mail] = await mails(app, smtp, ASKED)
    assert mail.recipients == ["ada@example.org"]
    assert "ada@example.com" not in mail.text  # the unproven mailbox learns nothing else

    r = await client.post(CONFIRM, json={"token": token_of(mail)})

    assert r.status_code == 204, r.text
    mine = await me(client, ada)
    assert (mine["email"], mine["emailVerified"], mine["pendingEmail"]) == (
        "ada@example.org", True, None,
    )  # fmt: skip
    [told] = await mails(app, smtp, TOLD)
    assert told.recipients == ["ada@example.com"]
    assert "ada@example.org" in told.text
    # Logins take the new address, not the old one.
    new = await client.post("/api/auth/login", json={"email": "ada@example.org",
                                                     "password": ada.password})  # fmt: skip
    assert new.status_code == 200, new.text
    old = await client.post("/api/auth/login", json={"email": "ada@example.com",
                                                     "password": ada.password})  # fmt: skip
    assert_problem(old, 401, "invalid_credentials")
    # The link is spent: the change it named is done.
    assert_problem(await client.post(CONFIRM, json={"token": token_of(mail)}), 422,
                   "invalid_token")  # fmt: skip


async def test_asking_needs_the_password_a_free_address_and_a_login(
    app: FastAPI, client: httpx.AsyncClient, api: Api, smtp: SmtpSink
) -> None:
    ada = await api.register("ada@example.com")
    await api.register("bob@example.com")

    wrong = {"newEmail": "ada@example.org", "password": "not my password"}
    r = await client.post(CHANGE, json=wrong, headers=ada.headers)
    assert_problem(r, 422, "wrong_password")
    taken = {"newEmail": "BOB@example.com", "password": ada.password}
    assert_problem(await client.post(CHANGE, json=taken, headers=ada.headers), 409, "email_taken")
    same = {"newEmail": "ada@example.com", "password": ada.password}
    assert_problem(await client.post(CHANGE, json=same, headers=ada.headers), 422, "same_email")
    created = await client.post("/api/account/api-tokens", json={"name": "ci"},
                                headers=ada.headers)  # fmt: skip
    token = {"Authorization": f"Bearer {created.json()['token']}"}
    fine = {"newEmail": "ada@example.org", "password": ada.password}
    r = await client.post(CHANGE, json=fine, headers=token)
    assert_problem(r, 403, "interactive_session_required")
    assert await mails(app, smtp, ASKED) == []
    assert (await me(client, ada))["pendingEmail"] is None


async def test_a_newer_request_or_an_expired_link_leaves_the_address_as_it_is(
    app: FastAPI, client: httpx.AsyncClient, api: Api, smtp: SmtpSink, clock: FrozenClock
) -> None:
    ada = await api.register("ada@example.com")
    for new in ("first@example.org", "second@example.org"):
        r = await client.post(CHANGE, json={"newEmail": new, "password": ada.password},
                              headers=ada.headers)  # fmt: skip
        assert r.status_code == 202, r.text
    # By address: the outbox may hand the two mails to the server in either order.
    sent = {m.recipients[0]: m for m in await mails(app, smtp, ASKED)}
    first, second = sent["first@example.org"], sent["second@example.org"]

    assert_problem(await client.post(CONFIRM, json={"token": token_of(first)}), 422,
                   "invalid_token")  # fmt: skip
    clock.advance(days=2, seconds=1)
    assert_problem(await client.post(CONFIRM, json={"token": token_of(second)}), 422,
                   "invalid_token")  # fmt: skip
    assert (await me(client, await api.login(ada)))["email"] == "ada@example.com"


async def test_an_address_taken_meanwhile_is_not_taken_over(
    app: FastAPI, client: httpx.AsyncClient, api: Api, smtp: SmtpSink
) -> None:
    ada = await api.register("ada@example.com")
    r = await client.post(CHANGE, json={"newEmail": "new@example.org", "password": ada.password},
                          headers=ada.headers)  # fmt: skip
    assert r.status_code == 202, r.text
    await api.register("new@example.org")  # someone signs up with it before Ada follows
    [mail] = await mails(app, smtp, ASKED)

    assert_problem(await client.post(CONFIRM, json={"token": token_of(mail)}), 409, "email_taken")
    assert (await me(client, ada))["email"] == "ada@example.com"


async def test_signing_out_everywhere_ends_every_login_and_keeps_api_tokens(
    client: httpx.AsyncClient, api: Api
) -> None:
    ada = await api.register("ada@example.com")
    phone = await api.login(ada)
    created = await client.post("/api/account/api-tokens", json={"name": "ci"},
                                headers=ada.headers)  # fmt: skip
    token = {"Authorization": f"Bearer {created.json()['token']}"}
    assert_problem(await client.post("/api/auth/logout-everywhere", headers=token), 403,
                   "interactive_session_required")  # fmt: skip

    r = await client.post("/api/auth/logout-everywhere", headers=ada.headers)

    assert (r.status_code, r.content) == (204, b"")
    for login in (ada, phone):
        assert_problem(await client.get("/api/auth/me", headers=login.headers), 401,
                       "token_revoked")  # fmt: skip
        refreshed = await client.post("/api/auth/refresh-token",
                                      json={"refresh_token": login.refresh_token})  # fmt: skip
        assert_problem(refreshed, 401, "session_ended")
    assert (await client.get("/api/projects", headers=token)).status_code == 200


async def reset_by_mail(
    app: FastAPI, client: httpx.AsyncClient, smtp: SmtpSink, email: str, password: str
) -> None:
    """What the account's holder does: ask for a reset, follow the mailed link."""
    r = await client.post("/api/auth/password-reset", json={"email": email})
    assert r.status_code == 202, r.text
    [mail] = await mails(app, smtp, "Reset your Buildbay password")
    [token] = parse_qs(urlsplit(mail.link("http")).query)["token"]
    r = await client.post("/api/auth/password-reset/confirm",
                          json={"token": token, "password": password})  # fmt: skip
    assert r.status_code == 204, r.text


@pytest.mark.parametrize("taken_back_by", ["a password reset", "a password change"])
async def test_taking_the_account_back_spends_a_change_of_address_asked_with_the_old_password(
    app: FastAPI, client: httpx.AsyncClient, api: Api, smtp: SmtpSink, taken_back_by: str
) -> None:
    """Whoever learnt Ada's password asks to move her account to their own mailbox. Ada
    notices and takes the account back (a reset, or a change of password): the link in the
    intruder's mailbox must not move the address afterwards, or the intruder, owning the
    address, resets the password again and has the account for good."""
    ada = await api.register("ada@example.com")
    asked = {"newEmail": "intruder@example.net", "password": ada.password}
    r = await client.post(CHANGE, json=asked, headers=(await api.login(ada)).headers)
    assert r.status_code == 202, r.text
    [mail] = await mails(app, smtp, ASKED)

    if taken_back_by == "a password reset":
        await reset_by_mail(app, client, smtp, "ada@example.com", "Ada's new passphrase")
    else:
        changed = {"currentPassword": ada.password, "newPassword": "Ada's new passphrase"}
        r = await client.post("/api/auth/change-password", json=changed, headers=ada.headers)
        assert r.status_code == 204, r.text

    assert_problem(await client.post(CONFIRM, json={"token": token_of(mail)}), 422,
                   "invalid_token")  # fmt: skip
    ada.password = "Ada's new passphrase"
    mine = await me(client, await api.login(ada))
    assert (mine["email"], mine["pendingEmail"]) == ("ada@example.com", None)


async def test_a_change_written_by_a_request_that_read_the_old_password_does_not_hold(
    app: FastAPI, client: httpx.AsyncClient, api: Api, smtp: SmtpSink
) -> None:
    """A request that checked the old password while the reset committed writes its change
    after the reset dropped the pending one: its link is still refused (it signs the password
    it was asked with)."""
    ada = await api.register("ada@example.com")
    asked = {"newEmail": "intruder@example.net", "password": ada.password}
    assert (await client.post(CHANGE, json=asked, headers=ada.headers)).status_code == 202
    [mail] = await mails(app, smtp, ASKED)
    ctx: AppContext = app.state.ctx
    db = ctx.sessions()
    try:
        written = await db.get_one(EmailChange, ada.user["id"])
        kept = {"user_id": written.user_id, "new_email": written.new_email,
                "requested_at": written.requested_at}  # fmt: skip
    finally:
        await finish(db, ok=True)

    await reset_by_mail(app, client, smtp, "ada@example.com", "Ada's new passphrase")
    db = ctx.sessions()
    try:
        db.add(EmailChange(**kept))  # as the racing request committed it, after the reset
    finally:
        await finish(db, ok=True)

    assert_problem(await client.post(CONFIRM, json={"token": token_of(mail)}), 422,
                   "invalid_token")  # fmt: skip


async def test_moving_the_address_spends_the_reset_links_mailed_to_the_old_one(
    app: FastAPI, client: httpx.AsyncClient, api: Api, smtp: SmtpSink
) -> None:
    """Ada leaves a mailbox she no longer trusts (a former employer's, one she lost): a reset
    link lying in it must not take the account once the address moved."""
    ada = await api.register("ada@example.com")
    r = await client.post("/api/auth/password-reset", json={"email": "ada@example.com"})
    assert r.status_code == 202, r.text
    [reset] = await mails(app, smtp, "Reset your Buildbay password")
    [reset_token] = parse_qs(urlsplit(reset.link("http")).query)["token"]
    asked = {"newEmail": "ada@example.org", "password": ada.password}
    assert (await client.post(CHANGE, json=asked, headers=ada.headers)).status_code == 202
    [mail] = await mails(app, smtp, ASKED)
    assert (await client.post(CONFIRM, json={"token": token_of(mail)})).status_code == 204

    r = await client.post("/api/auth/password-reset/confirm",
                          json={"token": reset_token, "password": "the old mailbox's"})  # fmt: skip

    assert_problem(r, 422, "invalid_token")
    assert (await me(client, ada))["email"] == "ada@example.org"  # Ada's login goes on

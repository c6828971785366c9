"""Notification mails carry a one-click unsubscribe (RFC 8058) that turns off the recipient's
new-build mails, without a login, and only theirs."""

from __future__ import annotations

import email
import email.policy

import httpx
import pytest
from fastapi import FastAPI

from buildbay.deps import AppContext
from buildbay.mail.message import ONE_CLICK, notification
from buildbay.mail.outbox import compose
from tests.conftest import Account, Api


def ctx_of(app: FastAPI) -> AppContext:
    ctx: AppContext = app.state.ctx
    return ctx


async def notify_new_builds(client: httpx.AsyncClient, account: Account) -> bool:
    r = await client.get("/api/auth/me", headers=account.headers)
    assert r.status_code == 200, r.text
    value: bool = r.json()["notifyNewBuilds"]
    return value


@pytest.fixture
async def carol(api: Api) -> Account:
    return await api.register("carol@example.com")


async def test_a_notification_carries_a_one_click_link_that_turns_off_new_build_mails(
    app: FastAPI, client: httpx.AsyncClient, carol: Account, api: Api
) -> None:
    ctx = ctx_of(app)
    other = await api.register("dave@example.com")
    url = ctx.unsubscribe.url(carol.user["id"], carol.email)
    mail = notification(
        "new_build", carol.email, "Acme 1.2 is ready", url, application="Acme",
        version="1.2 (7)", project="Acme", notes="", link="http://x/install/t", uploader="Ada",
        page="http://x/projects/p/apps/a",
    )  # fmt: skip
    message = email.message_from_string(
        compose("Buildbay <builds@example.com>", mail, ctx.clock.now()), policy=email.policy.default
    )
    assert str(message["List-Unsubscribe"]).strip() == f"<{url}>"
    assert message["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
    assert url in mail.text.splitlines()
    assert url.startswith("http://testserver/unsubscribe/")
    assert await notify_new_builds(client, carol) is True

    # What a mail client does (RFC 8058): a POST of the one-click body, no cookie, no token.
    r = await client.post(
        url, content=ONE_CLICK, headers={"Content-Type": "application/x-www-form-urlencoded"}
    )

    assert r.status_code == 200, r.text
    assert "gets no more e-mails about new builds" in r.text
    assert await notify_new_builds(client, carol) is False
    assert await notify_new_builds(client, other) is True
    # Again: the same answer, nothing else changes.
    r = await client.post(url, content=ONE_CLICK)
    assert r.status_code == 200


async def test_opening_the_link_only_asks(
    app: FastAPI, client: httpx.AsyncClient, carol: Account
) -> None:
    url = ctx_of(app).unsubscribe.url(carol.user["id"], carol.email)

    r = await client.get(url)

    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/html")
    assert "Stop new-build e-mails" in r.text
    assert await notify_new_builds(client, carol) is True


@pytest.mark.parametrize("method", ["GET", "POST"])
async def test_a_link_this_server_did_not_sign_is_refused(
    app: FastAPI, client: httpx.AsyncClient, carol: Account, method: str
) -> None:
    token = ctx_of(app).unsubscribe.token(carol.user["id"], carol.email)
    forged = token[:-2] + ("AA" if not token.endswith("AA") else "BB")

    for bad in (forged, carol.user["id"], "nothing", f"{carol.user['id']}."):
        r = await client.request(method, f"/unsubscribe/{bad}")
        assert r.status_code == 404, (bad, r.text)
        assert "This unsubscribe link is not valid" in r.text
    assert await notify_new_builds(client, carol) is True

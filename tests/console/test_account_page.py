"""The console's account page (issue 36), through the app itself: the name, the password (with
the current one), the e-mail address (changed once the link mailed to the new one is followed),
signing out everywhere, each form redirecting after its POST; and a tester, who uploads nothing,
is not shown a plan, a quota or a token form."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from html import unescape
from urllib.parse import urlsplit

import httpx
import pytest
from fastapi import FastAPI
from pydantic import SecretStr

from buildbay.config import Settings
from buildbay.deps import AppContext
from tests.conftest import BASE_URL, Account, Api, assert_problem
from tests.smtp import SmtpSink, smtp

__all__ = ["smtp"]
ORIGIN = {"Origin": BASE_URL}


@pytest.fixture
def settings(settings: Settings, smtp: SmtpSink) -> Settings:
    settings.smtp_url = SecretStr(smtp.url)
    return settings


@pytest.fixture
async def browser(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """Keeps cookies as a browser does (the console's are Secure: https, in process)."""
    base = BASE_URL.replace("http://", "https://")
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=base) as client:
        yield client


async def csrf_of(browser: httpx.AsyncClient, path: str) -> str:
    page = await browser.get(path)
    found = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert found, page.text[:300]
    return found[1]


async def sign_in(browser: httpx.AsyncClient, email: str, password: str) -> None:
    csrf = await csrf_of(browser, "/login")
    r = await browser.post("/login", data={"csrf": csrf, "email": email, "password": password},
                           headers=ORIGIN)  # fmt: skip
    assert r.status_code == 303, r.text


async def post(browser: httpx.AsyncClient, path: str, form: dict[str, str]) -> httpx.Response:
    csrf = await csrf_of(browser, "/account")
    return await browser.post(path, data={"csrf": csrf, **form}, headers=ORIGIN)


def notice(page: httpx.Response) -> str:
    found = re.search(r'<p class="notice" role="status">(.*?)</p>', page.text, re.S)
    assert found, page.text[:2000]
    return unescape(found[1])


def errors(page: httpx.Response) -> list[str]:
    found = re.findall(r'<p class="error[^"]*" id="e-[^"]+" role="alert">(.*?)</p>', page.text)
    return [unescape(text) for text in found]


async def test_the_name_and_the_password_change_and_each_form_redirects(
    browser: httpx.AsyncClient, client: httpx.AsyncClient, api: Api, owner: Account
) -> None:
    phone = await api.login(owner)  # another sign-in, which a new password ends
    await sign_in(browser, owner.email, owner.password)

    r = await post(browser, "/account/name", {"name": "Ada Lovelace"})
    assert (r.status_code, r.headers["location"]) == (303, "/account#profile")
    page = await browser.get("/account")
    assert notice(page) == "Your name is saved."
    assert "Ada Lovelace · " in page.text
    assert (await client.get("/api/auth/me", headers=owner.headers)).json()["name"] == (
        "Ada Lovelace"
    )

    wrong = {"currentPassword": "not my password", "newPassword": "a new long password"}
    r = await post(browser, "/account/password", wrong)
    assert r.status_code == 422, r.text
    assert errors(r) == ["That is not your current password."]
    short = {"currentPassword": owner.password, "newPassword": "short"}
    r = await post(browser, "/account/password", short)
    assert errors(r) == ["The new password needs at least 8 characters."]

    right = {"currentPassword": owner.password, "newPassword": "a new long password"}
    r = await post(browser, "/account/password", right)

    assert (r.status_code, r.headers["location"]) == (303, "/account#password")
    page = await browser.get("/account")  # this sign-in goes on
    assert notice(page) == "Your password is changed, and you are signed out everywhere else."
    assert_problem(await client.get("/api/auth/me", headers=phone.headers), 401, "token_revoked")
    r = await client.post("/api/auth/login", json={"email": owner.email,
                                                   "password": "a new long password"})  # fmt: skip
    assert r.status_code == 200, r.text


async def test_the_address_changes_when_the_link_mailed_to_the_new_one_is_followed(
    app: FastAPI, browser: httpx.AsyncClient, api: Api, owner: Account, smtp: SmtpSink
) -> None:
    await sign_in(browser, owner.email, owner.password)
    r = await post(browser, "/account/email", {"newEmail": "ada@example.org",
                                               "password": "not my password"})  # fmt: skip
    assert r.status_code == 422, r.text
    assert errors(r) == ["That is not your current password."]
    assert 'value="ada@example.org"' in r.text  # what was typed stays

    r = await post(browser, "/account/email", {"newEmail": "ada@example.org",
                                               "password": owner.password})  # fmt: skip

    assert (r.status_code, r.headers["location"]) == (303, "/account#notifications")
    page = await browser.get("/account")
    assert notice(page) == (
        "A confirmation mail is on its way to ada@example.org: your address changes when you "
        "follow its link."
    )
    assert "Waiting for you to follow the link mailed to ada@example.org" in page.text
    ctx: AppContext = app.state.ctx
    assert ctx.jobs is not None
    await ctx.jobs.run_until_idle()
    [mail] = [m for m in smtp.messages() if m.recipients == ["ada@example.org"]]
    link = urlsplit(mail.link("http"))
    landing = await browser.get(f"{link.path}?{link.query}")
    assert landing.status_code == 200
    assert "Change my e-mail address" in landing.text  # a button: opening the link changes nothing
    assert "ada@example.org" not in (await browser.get("/account")).text.split("·")[0]

    token = re.search(r'name="token" value="([^"]+)"', landing.text)
    assert token, landing.text
    csrf = await csrf_of(browser, f"{link.path}?{link.query}")
    r = await browser.post(link.path, data={"csrf": csrf, "token": unescape(token[1])},
                           headers=ORIGIN)  # fmt: skip

    assert (r.status_code, r.headers["location"]) == (303, "/confirm-email?changed=1")
    page = await browser.get("/account")
    assert "ada@example.org is verified" in page.text
    assert "Waiting for you" not in page.text


async def test_signing_out_everywhere_ends_this_browser_and_every_other_login(
    browser: httpx.AsyncClient, client: httpx.AsyncClient, api: Api, owner: Account
) -> None:
    phone = await api.login(owner)
    await sign_in(browser, owner.email, owner.password)

    r = await post(browser, "/account/sign-out-everywhere", {})

    assert (r.status_code, r.headers["location"]) == (303, "/login?signed_out=everywhere")
    login = await browser.get(r.headers["location"])
    assert "You are signed out everywhere" in login.text
    r = await browser.get("/account")
    assert (r.status_code, r.headers["location"]) == (303, "/login?next=/account")
    for account in (owner, phone):
        assert_problem(await client.get("/api/auth/me", headers=account.headers), 401,
                       "token_revoked")  # fmt: skip


async def test_a_tester_sees_no_plan_quota_or_token_form_and_a_team_lead_does(
    browser: httpx.AsyncClient, api: Api, owner: Account
) -> None:
    tess = await api.register("tess@example.com")
    project = await api.project(owner)
    await api.add_member(owner, project["id"], tess, "tester")

    await sign_in(browser, tess.email, tess.password)
    page = await browser.get("/account")
    assert page.status_code == 200
    for unusable in ("Plan and usage", "Storage quota", "Create token", 'id="api-tokens"'):
        assert unusable not in page.text, unusable
    for usable in ("Change password", "Change e-mail address", "Save name",
                   "Sign out everywhere", "E-mail me when a new build"):  # fmt: skip
        assert usable in page.text, usable

    browser.cookies.clear()
    await sign_in(browser, owner.email, owner.password)
    page = await browser.get("/account")
    for shown in ("Plan and usage", "Storage quota", "Create token", "Change password"):
        assert shown in page.text, shown

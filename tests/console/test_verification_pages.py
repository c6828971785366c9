"""The console's side of e-mail verification (through the app, no browser): the sign-up's mail
and its page, asking for another from the account page, and "e-mail not verified" where admins
add and see members, with a confirmation before adding such an account."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from fastapi import FastAPI
from pydantic import SecretStr

from buildbay.config import Settings
from buildbay.deps import AppContext
from tests.conftest import BASE_URL, Account, Api
from tests.smtp import SIGN_UP_SUBJECT, SmtpSink, smtp

__all__ = ["smtp"]
ORIGIN = {"Origin": BASE_URL}
PASSWORD = "correct horse"
NOT_VERIFIED = "e-mail not verified"


@pytest.fixture
def settings(settings: Settings, smtp: SmtpSink) -> Settings:
    settings.smtp_url = SecretStr(smtp.url)
    return settings


@pytest.fixture
async def browser(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    base = BASE_URL.replace("http://", "https://")
    async with httpx.AsyncClient(transport=transport, base_url=base) as client:
        yield client


async def post(browser: httpx.AsyncClient, path: str, form: dict[str, str],
               page: str | None = None) -> httpx.Response:  # fmt: skip
    shown = await browser.get(page or path)
    found = re.search(r'name="csrf" value="([^"]+)"', shown.text)
    assert found, shown.text[:300]
    return await browser.post(path, data={"csrf": found.group(1), **form}, headers=ORIGIN)


async def verification_links(app: FastAPI, smtp: SmtpSink, email: str) -> list[str]:
    ctx: AppContext = app.state.ctx
    assert ctx.jobs is not None
    await ctx.jobs.run_until_idle()
    return [
        m.link("http").removeprefix("http://testserver")
        for m in smtp.messages(sign_ups=True)
        if m.recipients == [email] and m.message["Subject"] == SIGN_UP_SUBJECT
    ]


async def verify(browser: httpx.AsyncClient, link: str) -> httpx.Response:
    page = await browser.get(link)
    assert page.status_code == 200, page.text
    assert "Confirm my e-mail address" in page.text
    [token] = parse_qs(urlsplit(link).query)["token"]
    return await post(browser, "/verify-email", {"token": token}, link)


async def test_a_console_sign_up_is_verified_from_its_mail_and_can_ask_for_another(
    browser: httpx.AsyncClient, app: FastAPI, smtp: SmtpSink
) -> None:
    r = await post(browser, "/signup", {"email": "ada@example.com", "password": PASSWORD},
                   "/signup")  # fmt: skip
    assert r.status_code == 303, r.text
    [first] = await verification_links(app, smtp, "ada@example.com")
    account = await browser.get("/account")
    assert NOT_VERIFIED in account.text
    assert "Send the verification mail again" in account.text

    r = await post(browser, "/account/verification-mail", {}, "/account")
    assert (r.status_code, r.headers["location"]) == (
        303,
        "/account?verification=sent#notifications",
    )
    account = await browser.get(r.headers["location"])
    assert "A new verification mail is on its way to ada@example.com." in account.text
    links = await verification_links(app, smtp, "ada@example.com")
    assert len(links) == 2
    assert links[0] == first

    r = await verify(browser, links[1])
    assert (r.status_code, r.headers["location"]) == (303, "/verify-email?verified=1")
    done = await browser.get(r.headers["location"])
    assert "Your e-mail address is verified." in done.text
    account = await browser.get("/account")
    assert NOT_VERIFIED not in account.text
    assert "ada@example.com is verified" in account.text


async def test_a_link_that_is_not_ours_says_so_in_a_sentence(
    browser: httpx.AsyncClient, app: FastAPI, smtp: SmtpSink, api: Api
) -> None:
    await api.register("ada@example.com")
    [link] = await verification_links(app, smtp, "ada@example.com")

    r = await verify(browser, link[:-2] + "xx")

    assert r.status_code == 422
    assert "This link is unknown or more than a week old." in r.text


async def test_adding_an_unverified_account_asks_first_and_the_pages_say_it(
    browser: httpx.AsyncClient, app: FastAPI, smtp: SmtpSink, api: Api, owner: Account
) -> None:
    project = await api.project(owner, "Acme")
    newcomer = await api.register("newcomer@example.com")
    here = f"/projects/{project['id']}"
    r = await post(browser, "/login", {"email": owner.email, "password": owner.password}, "/login")
    assert r.status_code == 303

    r = await post(browser, f"{here}/members", {"email": newcomer.email, "role": "developer"},
                   here)  # fmt: skip

    assert r.status_code == 409
    assert "has not verified this e-mail address" in r.text
    assert 'name="unverifiedOk"' in r.text
    assert re.search(r'<option value="developer" selected>', r.text)  # the choice is kept
    members = await browser.get(here)
    assert "newcomer@example.com" not in members.text  # nothing added yet

    r = await post(browser, f"{here}/members", {"email": newcomer.email, "role": "developer",
                                                "unverifiedOk": "on"}, here)  # fmt: skip

    assert (r.status_code, r.headers["location"]) == (303, f"{here}#members")
    page = await browser.get(here)
    row = re.search(r"newcomer@example.com(.*?)</td>", page.text, re.S)
    assert row is not None
    assert NOT_VERIFIED in row.group(1)
    groups = await browser.get(f"{here}/groups")
    row = re.search(r"newcomer@example.com(.*?)</td>", groups.text, re.S)
    assert row is not None
    assert NOT_VERIFIED in row.group(1)


async def test_a_verified_account_is_added_at_once_and_shown_without_the_warning(
    browser: httpx.AsyncClient, app: FastAPI, smtp: SmtpSink, api: Api, owner: Account
) -> None:
    project = await api.project(owner, "Acme")
    await api.register("bob@example.com")
    [link] = await verification_links(app, smtp, "bob@example.com")
    assert (await verify(browser, link)).status_code == 303
    here = f"/projects/{project['id']}"
    r = await post(browser, "/login", {"email": owner.email, "password": owner.password}, "/login")
    assert r.status_code == 303

    r = await post(browser, f"{here}/members", {"email": "bob@example.com", "role": "tester"},
                   here)  # fmt: skip

    assert (r.status_code, r.headers["location"]) == (303, f"{here}#members")
    page = await browser.get(here)
    row = re.search(r"bob@example.com(.*?)</td>", page.text, re.S)
    assert row is not None
    assert NOT_VERIFIED not in row.group(1)

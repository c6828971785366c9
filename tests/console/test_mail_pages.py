"""The console's pages for what mail brings (through the app itself, no browser): a forgotten
password, invitations sent, resent, revoked and accepted, and the new-build mail setting."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from fastapi import FastAPI
from pydantic import SecretStr

from buildbay.auth.password_reset import RESET_LIFETIME
from buildbay.clock import FrozenClock
from buildbay.config import Settings
from buildbay.deps import AppContext
from tests.conftest import BASE_URL, Account, Api
from tests.smtp import SmtpSink, smtp

__all__ = ["smtp"]
ORIGIN = {"Origin": BASE_URL}
PASSWORD = "correct horse"


@pytest.fixture
def settings(settings: Settings, smtp: SmtpSink) -> Settings:
    settings.smtp_url = SecretStr(smtp.url)
    return settings


@pytest.fixture
async def browser(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """Keeps cookies as a browser does (the console's are Secure, hence https)."""
    transport = httpx.ASGITransport(app=app)
    base = BASE_URL.replace("http://", "https://")
    async with httpx.AsyncClient(transport=transport, base_url=base) as client:
        yield client


async def csrf(browser: httpx.AsyncClient, path: str) -> str:
    page = await browser.get(path)
    found = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert found, page.text[:300]
    return found.group(1)


async def post(browser: httpx.AsyncClient, path: str, form: dict[str, str],
               page: str | None = None) -> httpx.Response:  # fmt: skip
    token = await csrf(browser, page or path)
    return await browser.post(path, data={"csrf": token, **form}, headers=ORIGIN)


async def sign_in(browser: httpx.AsyncClient, email: str, password: str = PASSWORD) -> None:
    r = await post(browser, "/login", {"email": email, "password": password})
    assert r.status_code == 303, r.text


async def mails(app: FastAPI, smtp: SmtpSink) -> list[str]:
    """Run the outbox; the action link of each mail that arrived, in order."""
    ctx: AppContext = app.state.ctx
    assert ctx.jobs is not None
    await ctx.jobs.run_until_idle()
    return [m.link("http") for m in smtp.messages()]


async def test_a_forgotten_password_is_reset_from_the_mailed_link(
    browser: httpx.AsyncClient, app: FastAPI, smtp: SmtpSink, api: Api
) -> None:
    await api.register("ada@example.com", PASSWORD)
    login = await browser.get("/login")
    assert 'href="/forgot-password"' in login.text

    r = await post(browser, "/forgot-password", {"email": "ada@example.com"})
    assert (r.status_code, r.headers["location"]) == (303, "/forgot-password?sent=1")
    r = await browser.get("/forgot-password?sent=1")
    assert "If an account has this e-mail, a link" in r.text
    [link] = await mails(app, smtp)
    path = link.removeprefix("http://testserver")
    page = await browser.get(path)
    assert page.status_code == 200
    token = parse_qs(urlsplit(link).query)["token"][0]
    assert f'name="token" value="{token}"' in page.text

    short = await post(browser, "/reset-password", {"token": token, "password": "short"}, path)
    assert short.status_code == 422
    assert "Choose a password of 8 to 128 characters." in short.text
    r = await post(browser, "/reset-password", {"token": token, "password": "a new password"}, path)
    assert (r.status_code, r.headers["location"]) == (303, "/login?reset=1")
    again = await post(browser, "/reset-password", {"token": token, "password": "other one!"},
                       "/forgot-password")  # fmt: skip
    assert again.status_code == 422
    assert "This link is unknown, was used already" in again.text
    await sign_in(browser, "ada@example.com", "a new password")


async def test_a_used_or_unknown_reset_link_says_so_before_the_form(
    browser: httpx.AsyncClient, app: FastAPI, smtp: SmtpSink, api: Api
) -> None:
    await api.register("ada@example.com", PASSWORD)
    await post(browser, "/forgot-password", {"email": "ada@example.com"})
    [link] = await mails(app, smtp)
    path = link.removeprefix("http://testserver")
    token = parse_qs(urlsplit(link).query)["token"][0]
    r = await post(browser, "/reset-password", {"token": token, "password": "a new password"}, path)
    assert r.status_code == 303

    used = await browser.get(path)
    assert used.status_code == 410
    assert "This link was used already" in used.text
    assert 'name="password"' not in used.text
    assert 'name="token"' not in used.text
    assert 'href="/forgot-password"' in used.text
    assert 'href="/login"' in used.text

    unknown = await browser.get(path[:-4])  # cut short
    assert unknown.status_code == 404
    assert "This link is not one Buildbay sent" in unknown.text
    assert 'name="password"' not in unknown.text


async def test_an_expired_reset_link_says_so_before_the_form(
    browser: httpx.AsyncClient, app: FastAPI, smtp: SmtpSink, api: Api, clock: FrozenClock
) -> None:
    await api.register("ada@example.com", PASSWORD)
    await post(browser, "/forgot-password", {"email": "ada@example.com"})
    [link] = await mails(app, smtp)
    clock.advance(seconds=RESET_LIFETIME.total_seconds())

    r = await browser.get(link.removeprefix("http://testserver"))

    assert r.status_code == 410
    assert "This link is more than an hour old" in r.text
    assert 'name="password"' not in r.text


async def test_forgot_password_says_the_same_for_an_unknown_email_and_checks_the_field(
    browser: httpx.AsyncClient, app: FastAPI, smtp: SmtpSink
) -> None:
    r = await post(browser, "/forgot-password", {"email": "nobody@example.com"})
    assert (r.status_code, r.headers["location"]) == (303, "/forgot-password?sent=1")
    r = await post(browser, "/forgot-password", {"email": "not an address"}, "/forgot-password")
    assert r.status_code == 422
    assert "Enter the e-mail address of your account." in r.text
    assert await mails(app, smtp) == []


async def test_add_member_offers_to_invite_someone_without_an_account(
    browser: httpx.AsyncClient, app: FastAPI, smtp: SmtpSink, api: Api, owner: Account
) -> None:
    project = await api.project(owner, "Acme")
    await sign_in(browser, owner.email)
    here = f"/projects/{project['id']}"

    r = await post(browser, f"{here}/members", {"email": "erin@example.com", "role": "developer"},
                   here)  # fmt: skip

    assert r.status_code == 422
    assert "No Buildbay account has this e-mail yet. Invite them instead" in r.text
    assert "email:" not in r.text  # the API's detail names the field; the page does not
    offer = re.search(r'<form method="post" action="([^"]+)" class="row offer-invite">(.*?)</form>',
                      r.text, re.S)  # fmt: skip
    assert offer, r.text
    assert offer.group(1) == f"{here}/invitations"
    assert 'name="email" value="erin@example.com"' in offer.group(2)
    assert 'name="role" value="developer"' in offer.group(2)
    assert "Invite erin@example.com as a developer</button>" in offer.group(2)

    r = await post(browser, offer.group(1), {"email": "erin@example.com", "role": "developer"},
                   here)  # fmt: skip
    assert r.status_code == 303
    [link] = await mails(app, smtp)
    assert "/invitations/" in link
    page = await browser.get(here)
    assert re.search(r"erin@example.com</td><td[^>]*>Developer</td>\s*<td[^>]*>pending", page.text)
    # An address with an account is added, not offered an invitation.
    await api.register("dev@example.com", PASSWORD)
    r = await post(browser, f"{here}/members", {"email": "dev@example.com", "role": "tester",
                                                "unverifiedOk": "on"}, here)  # fmt: skip
    assert r.status_code == 303


async def test_invitations_are_sent_resent_and_revoked_from_the_project_page(
    browser: httpx.AsyncClient, app: FastAPI, smtp: SmtpSink, api: Api, owner: Account
) -> None:
    project = await api.project(owner, "Acme")
    await sign_in(browser, owner.email)
    here = f"/projects/{project['id']}"

    r = await post(browser, f"{here}/invitations", {"email": "erin@example.com",
                                                    "role": "developer"}, here)  # fmt: skip
    assert r.status_code == 303
    page = await browser.get(r.headers["location"])
    assert "Invitation sent to erin@example.com." in page.text
    assert re.search(r"erin@example.com</td><td[^>]*>Developer</td>\s*<td[^>]*>pending", page.text)
    [invitation] = re.findall(r"/invitations/(inv_\w+)/resend", page.text)

    r = await post(browser, f"{here}/invitations/{invitation}/resend", {}, here)
    assert r.status_code == 303
    links = await mails(app, smtp)  # the outbox sends both at once: in either order
    assert len(set(links)) == 2
    r = await post(browser, f"{here}/invitations/{invitation}/revoke", {}, here)
    assert r.status_code == 303
    page = await browser.get(here)
    assert re.search(r"<td[^>]*>revoked</td>", page.text)
    pages = [await browser.get(link.removeprefix("http://testserver")) for link in links]
    # Both links are the revoked invitation's: the first one kept working after the resend.
    assert [r.status_code for r in pages] == [200, 200]
    assert all("This invitation was withdrawn." in r.text for r in pages)
    r = await post(browser, f"{here}/invitations", {"email": owner.email, "role": "tester"}, here)
    assert r.status_code == 409
    assert "This e-mail is already a member of the project" in r.text


async def test_the_invitation_page_leads_a_newcomer_to_sign_up_then_to_join(
    browser: httpx.AsyncClient, app: FastAPI, smtp: SmtpSink, api: Api, owner: Account,
    client: httpx.AsyncClient,
) -> None:  # fmt: skip
    project = await api.project(owner, "Acme")
    r = await client.post(f"/api/projects/{project['id']}/invitations",
                          json={"email": "erin@example.com", "role": "tester"},
                          headers=owner.headers)  # fmt: skip
    assert r.status_code == 201
    [link] = await mails(app, smtp)
    path = link.removeprefix("http://testserver")

    page = await browser.get(path)
    assert page.status_code == 200
    assert "invited <strong>erin@example.com</strong> to the project Acme" in page.text
    signup = re.search(r'href="(/signup\?[^"]+)"', page.text)
    assert signup is not None
    signup_path = signup.group(1).replace("&amp;", "&")
    form = await browser.get(signup_path)
    assert 'value="erin@example.com"' in form.text
    r = await post(browser, "/signup", {"email": "erin@example.com", "password": PASSWORD,
                                        "next": path}, signup_path)  # fmt: skip
    assert (r.status_code, r.headers["location"]) == (303, path)
    r = await post(browser, f"{path}/accept", {}, path)
    assert r.status_code == 303
    assert urlsplit(r.headers["location"]).path == f"/projects/{project['id']}"
    page = await browser.get(r.headers["location"])
    assert "Welcome: you are a member of this project now." in page.text
    page = await browser.get(path)
    assert "This invitation was accepted already." in page.text


async def test_the_invitation_page_tells_someone_signed_in_as_another_email(
    browser: httpx.AsyncClient, app: FastAPI, smtp: SmtpSink, api: Api, owner: Account,
    client: httpx.AsyncClient,
) -> None:  # fmt: skip
    project = await api.project(owner, "Acme")
    invite = {"email": "erin@example.com", "role": "tester"}
    await client.post(
        f"/api/projects/{project['id']}/invitations", json=invite, headers=owner.headers
    )
    [link] = await mails(app, smtp)
    path = link.removeprefix("http://testserver")
    await sign_in(browser, owner.email)

    page = await browser.get(path)
    assert f"You are signed in as {owner.email}, but this invitation is for erin" in page.text
    r = await post(browser, f"{path}/accept", {}, path)
    assert r.status_code == 403
    assert "sign in with that e-mail to accept it" in r.text
    assert (await browser.get("/invitations/bbi_unknown")).status_code == 404


async def test_the_account_page_turns_new_build_mails_off_and_on(
    browser: httpx.AsyncClient, api: Api, owner: Account, client: httpx.AsyncClient
) -> None:
    await sign_in(browser, owner.email)
    page = await browser.get("/account")
    assert 'name="notifyNewBuilds" value="on" checked' in page.text

    r = await post(browser, "/account/notifications", {}, "/account")
    assert r.status_code == 303
    me = await client.get("/api/auth/me", headers=owner.headers)
    assert me.json()["notifyNewBuilds"] is False
    page = await browser.get("/account")
    assert 'name="notifyNewBuilds" value="on">' in page.text
    await post(browser, "/account/notifications", {"notifyNewBuilds": "on"}, "/account")
    me = await client.get("/api/auth/me", headers=owner.headers)
    assert me.json()["notifyNewBuilds"] is True

"""Privacy between testers (issue 36): in the console a tester sees the names of the project's
people, never their e-mail addresses (developers and above do, who add and invite by address);
the API's member list keeps the seed's shape, addresses included."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import httpx
import pytest
from fastapi import FastAPI

from tests.conftest import BASE_URL, Account, Api

ORIGIN = {"Origin": BASE_URL}


@pytest.fixture
async def browser_like(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """Keeps cookies as a browser does (the console's are Secure: https, in process)."""
    transport = httpx.ASGITransport(app=app)
    base = BASE_URL.replace("http://", "https://")
    async with httpx.AsyncClient(transport=transport, base_url=base) as client:
        yield client


async def sign_in(browser: httpx.AsyncClient, account: Account) -> None:
    page = await browser.get("/login")
    csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert csrf, page.text[:300]
    r = await browser.post(
        "/login",
        data={"csrf": csrf[1], "email": account.email, "password": account.password},
        headers=ORIGIN,
    )
    assert r.status_code == 303, r.text


async def named(api: Api, email: str, name: str) -> Account:
    account = await api.register(email)
    r = await api.client.put("/api/auth/me", json={"name": name}, headers=account.headers)
    assert r.status_code == 200, r.text
    return account


async def test_a_tester_sees_names_and_no_addresses_a_developer_sees_both(
    browser_like: httpx.AsyncClient, api: Api, client: httpx.AsyncClient
) -> None:
    olga = await named(api, "olga.owner@example.com", "Olga Owner")
    dev = await named(api, "dev.dora@example.com", "Dora Developer")
    tess = await named(api, "tess.tester@example.com", "Tess Tester")
    tom = await named(api, "tom.tester@example.com", "Tom Tester")
    project = await api.project(olga)
    for account, role in ((dev, "developer"), (tess, "tester"), (tom, "tester")):
        await api.add_member(olga, project["id"], account, role)
    groups = f"/api/projects/{project['id']}/groups"
    group = (await client.post(groups, json={"name": "QA"}, headers=olga.headers)).json()
    r = await client.post(
        f"{groups}/{group['id']}/testers",
        json={"emails": [tom.email, "newcomer.secret@example.com"]},
        headers=olga.headers,
    )
    assert r.status_code == 200, r.text
    addresses = [olga.email, dev.email, tom.email, "newcomer.secret@example.com"]

    await sign_in(browser_like, tess)
    project_page = await browser_like.get(f"/projects/{project['id']}")
    groups_page = await browser_like.get(f"/projects/{project['id']}/groups")

    for page in (project_page, groups_page):
        assert page.status_code == 200, page.text[:300]
        for address in [*addresses, tess.email]:
            assert address not in page.text, address
        assert "Tom Tester" in page.text
    assert "Olga Owner" in project_page.text
    assert "Dora Developer" in project_page.text
    assert "1 person invited, joining when they accept." in groups_page.text

    # A developer sees the addresses, on both pages.
    browser_like.cookies.clear()
    await sign_in(browser_like, dev)
    project_page = await browser_like.get(f"/projects/{project['id']}")
    groups_page = await browser_like.get(f"/projects/{project['id']}/groups")
    for address in (olga.email, tess.email, tom.email):
        assert address in project_page.text
    assert tom.email in groups_page.text
    assert "newcomer.secret@example.com" in groups_page.text

    # The API's member list keeps the seed's shape for a tester: addresses included.
    r = await client.get(f"/api/projects/{project['id']}/members", headers=tess.headers)
    assert r.status_code == 200, r.text
    assert {m["email"] for m in r.json()["members"]} == {olga.email, dev.email, tess.email,
                                                          tom.email}  # fmt: skip
    assert set(r.json()["members"][0]) == {"userId", "email", "name", "role", "createdAt",
                                           "emailVerified"}  # fmt: skip

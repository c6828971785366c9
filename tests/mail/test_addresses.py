"""Only addresses that can be mailed are taken (issue 34): an internationalised domain is mailed
in its ASCII form; a name before the @ outside ASCII (it needs SMTPUTF8 of every server on the
way) or holding `=?` is refused with 422 at every door that takes an e-mail, API and console.
One recipient that cannot be mailed (an address stored before these rules) fails alone, and
says so; everyone else in the distribution is mailed."""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator
from html import unescape
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from pydantic import SecretStr
from sqlalchemy import select

from buildbay.auth.models import User
from buildbay.config import Plan, Settings
from buildbay.context import AppContext
from buildbay.ids import new_id
from buildbay.jobs.models import Job, JobStatus
from buildbay.projects.enums import ProjectRole
from buildbay.projects.models import ProjectMember
from tests.conftest import BASE_URL, Account, Api, assert_problem
from tests.smtp import SmtpSink

UNMAILABLE = {
    "élève@exemple.fr": "has characters outside ASCII before the @, which not every mail "
    "server takes; use an ASCII address",
    "=?utf-8?q?x?=@example.com": "contains '=?', which mail programs read as encoded text "
    "(RFC 2047)",
}
ORIGIN = {"Origin": BASE_URL}


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


class Doors:
    def __init__(self, client: httpx.AsyncClient, api: Api, owner: Account) -> None:
        self.client, self.api, self.owner = client, api, owner
        self.project: dict[str, Any] = {}
        self.group = ""
        self.builds = ""
        self.build: dict[str, Any] = {}

    async def open(self) -> Doors:
        self.project = await self.api.project(self.owner)
        application = await self.api.application(self.owner, self.project["id"])
        r = await self.client.post(
            f"/api/projects/{self.project['id']}/groups",
            json={"name": "QA"},
            headers=self.owner.headers,
        )
        assert r.status_code == 201, r.text
        self.group = r.json()["id"]
        self.builds = f"/api/app-distribution/{self.project['id']}/{application['id']}/builds"
        self.build = await self.api.upload(self.owner, self.project["id"], application["id"])
        return self

    def each(self, address: str) -> list[tuple[str, dict[str, Any], str]]:
        """Every API door that takes an e-mail: path, body, and the field the 422 names."""
        project = f"/api/projects/{self.project['id']}"
        return [
            ("/api/auth/register", {"email": address, "password": "correct horse"}, "email"),
            (f"{project}/members", {"email": address, "role": "tester"}, "email"),
            (f"{project}/invitations", {"email": address, "role": "tester"}, "email"),
            (f"{project}/groups/{self.group}/testers", {"emails": [address]}, "emails.0"),
            (f"{self.builds}/{self.build['buildId']}/distribute", {"emails": [address]},
             "emails.0"),
            ("/api/auth/password-reset", {"email": address}, "email"),
        ]  # fmt: skip


@pytest.mark.parametrize("address", list(UNMAILABLE))
async def test_an_address_mail_cannot_reach_is_refused_at_every_api_door(
    client: httpx.AsyncClient, api: Api, owner: Account, smtp: SmtpSink, address: str
) -> None:
    doors = await Doors(client, api, owner).open()
    for path, body, field in doors.each(address):
        r = await client.post(path, json=body, headers=owner.headers)

        problem = assert_problem(r, 422, "validation_error")
        assert problem["errors"] == [{"field": field, "message": UNMAILABLE[address]}], path
    assert smtp.messages() == []


@pytest.fixture
async def browser(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    base = BASE_URL.replace("http://", "https://")
    async with httpx.AsyncClient(transport=transport, base_url=base) as client:
        yield client


async def _refused(browser: httpx.AsyncClient, page: str, path: str, form: dict[str, str]) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', (await browser.get(page)).text)
    assert found
    r = await browser.post(path, data={"csrf": found.group(1), **form}, headers=ORIGIN)
    assert r.status_code == 422, r.text[:300]
    [error] = re.findall(r'<p class="error[^"]*"[^>]*role="alert">(.*?)</p>', r.text, re.S)
    return unescape(error).strip()


@pytest.mark.parametrize("address", list(UNMAILABLE))
async def test_the_consoles_forms_refuse_it_and_say_why(
    browser: httpx.AsyncClient, client: httpx.AsyncClient, api: Api, owner: Account, address: str
) -> None:
    doors = await Doors(client, api, owner).open()
    said = f"The e-mail address {address} {UNMAILABLE[address]}."
    signup = {"email": address, "password": "correct horse", "name": ""}
    assert await _refused(browser, "/signup", "/signup", signup) == said
    # No account has such an address: the page asks for the account's, as for any invalid one.
    reset = {"email": address}
    asked = "Enter the e-mail address of your account."
    assert await _refused(browser, "/forgot-password", "/forgot-password", reset) == asked
    found = re.search(r'name="csrf" value="([^"]+)"', (await browser.get("/login")).text)
    assert found
    r = await browser.post("/login", headers=ORIGIN, data={
        "csrf": found.group(1), "email": owner.email, "password": owner.password,
    })  # fmt: skip
    assert r.status_code == 303
    project = f"/projects/{doors.project['id']}"
    member = {"email": address, "role": "tester"}
    assert await _refused(browser, project, f"{project}/members", member) == said
    assert await _refused(browser, project, f"{project}/invitations", member) == said
    groups = f"{project}/groups"
    assert await _refused(browser, groups, f"{groups}/{doors.group}/testers",
                          {"emails": address}) == said  # fmt: skip


async def test_an_internationalised_domain_registers_and_is_mailed_in_its_ascii_form(
    app: FastAPI, client: httpx.AsyncClient, api: Api, owner: Account, smtp: SmtpSink
) -> None:
    vera = await api.register("v@пример.рф")
    assert vera.user["email"] == "v@пример.рф"
    project = await api.project(owner)

    r = await client.post(
        f"/api/projects/{project['id']}/invitations",
        json={"email": "w@пример.рф", "role": "tester"},
        headers=owner.headers,
    )
    assert r.status_code == 201, r.text
    r = await client.post("/api/auth/password-reset", json={"email": "v@пример.рф"})
    assert r.status_code == 202, r.text
    await run_jobs(app)

    received = {m.recipients[0]: m for m in smtp.messages()}
    assert set(received) == {"w@xn--e1afmkfd.xn--p1ai", "v@xn--e1afmkfd.xn--p1ai"}
    assert received["w@xn--e1afmkfd.xn--p1ai"].message["To"] == "w@xn--e1afmkfd.xn--p1ai"
    assert "/invitations/" in received["w@xn--e1afmkfd.xn--p1ai"].text
    assert received["v@xn--e1afmkfd.xn--p1ai"].message["Subject"] == "Reset your Buildbay password"


async def test_one_member_mail_cannot_reach_fails_alone_and_everyone_else_is_mailed(
    app: FastAPI,
    client: httpx.AsyncClient,
    api: Api,
    owner: Account,
    smtp: SmtpSink,
    browser: httpx.AsyncClient,
    caplog: pytest.LogCaptureFixture,
) -> None:
    project = await api.project(owner)
    application = await api.application(owner, project["id"])
    testers = [await api.register(f"t{n}@example.com") for n in range(3)]
    for tester in testers:
        await api.add_member(owner, project["id"], tester, "tester")
    # A member whose address was taken before today's rules.
    ctx = ctx_of(app)
    now = ctx.clock.now()
    async with ctx.sessions() as db, db.begin():
        user_id = new_id("usr")
        db.add(User(id=user_id, email="élève@exemple.fr", name="Élève", password_hash="-",
                    plan=Plan.FREE, created_at=now, updated_at=now))  # fmt: skip
        await db.flush()
        db.add(ProjectMember(project_id=project["id"], user_id=user_id,
                             role=ProjectRole.TESTER, created_at=now))  # fmt: skip
    build = await api.upload(owner, project["id"], application["id"])
    builds = f"/api/app-distribution/{project['id']}/{application['id']}/builds"

    r = await client.post(
        f"{builds}/{build['buildId']}/distribute",
        json={"groups": ["everyone"], "notify": True},
        headers=owner.headers,
    )
    assert r.status_code == 200, r.text
    with caplog.at_level(logging.WARNING, logger="buildbay.distribution"):
        await run_jobs(app)

    assert sorted(m.recipients[0] for m in smtp.messages()) == [t.email for t in testers]
    async with ctx.sessions() as db:
        statuses = set((await db.scalars(select(Job.status))).all())
    assert statuses == {JobStatus.DONE}  # nothing failed, nothing waits for a retry
    r = await client.get(f"{builds}/{build['buildId']}/installs", headers=owner.headers)
    assert r.status_code == 200, r.text
    by_email = {t["email"]: t for t in r.json()["testers"]}
    refused = by_email["élève@exemple.fr"]
    assert refused["notifiedAt"] is None
    assert refused["mailError"] == UNMAILABLE["élève@exemple.fr"].replace("has", "the address has")
    for tester in testers:
        assert by_email[tester.email]["notifiedAt"] is not None
        assert by_email[tester.email]["mailError"] is None
    assert any("'élève@exemple.fr'" in r.getMessage() for r in caplog.records)

    # Distributed again: the others are not mailed twice, nor is the refused one tried again.
    r = await client.post(
        f"{builds}/{build['buildId']}/distribute",
        json={"groups": ["everyone"], "notify": True},
        headers=owner.headers,
    )
    assert r.status_code == 200, r.text
    await run_jobs(app)
    assert len(smtp.messages()) == 3

    # The build's page says so beside the tester.
    found = re.search(r'name="csrf" value="([^"]+)"', (await browser.get("/login")).text)
    assert found
    r = await browser.post("/login", headers=ORIGIN, data={
        "csrf": found.group(1), "email": owner.email, "password": owner.password,
    })  # fmt: skip
    assert r.status_code == 303
    page = await browser.get(
        f"/projects/{project['id']}/apps/{application['id']}/builds/{build['buildId']}"
    )
    assert page.status_code == 200
    # Its row in who installed (the install links list names the person too).
    rows = [r for r in unescape(page.text).split("<tr>") if "élève@exemple.fr" in r]
    [row] = [r for r in rows if "Not sent" in r]
    assert "Not sent: the address has characters outside ASCII before the @" in row

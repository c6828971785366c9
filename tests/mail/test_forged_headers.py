"""Mail headers cannot be forged through what users name things (issue 34, CVE-2024-6923).

Python before its fix (3.11.7 runs here) decodes an RFC 2047 encoded word when it folds a
header and writes a decoded CR/LF as it is. A name holding one gave every invitation and
new-build mail a Reply-To, a content type and a body of the attacker's. Names and addresses
holding `=?` are refused at the door (422); and whatever is stored (rows from before, a build's
own version read from its file) reaches a header neutralised. Each mail is read as it arrives,
from the .eml file and from a real SMTP server, with the standard library's parser."""

from __future__ import annotations

import email
import email.policy
from collections.abc import Iterator
from email.message import EmailMessage
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from pydantic import SecretStr
from sqlalchemy import update

from buildbay.applications.models import Application
from buildbay.auth.cache import ACCESS_CACHE_TTL
from buildbay.auth.models import User
from buildbay.builds.models import Build
from buildbay.clock import FrozenClock
from buildbay.config import Settings
from buildbay.context import AppContext
from buildbay.projects.models import Project
from tests.conftest import BASE_URL, Account, Api, assert_problem
from tests.smtp import SIGN_UP_SUBJECT, SmtpSink

EVIL = "=?utf-8?q?IT_Support=0D=0AReply-To:attacker@evil.example=0D=0AContent-Type:text/html;x=?="
# What the header shows of it: the same characters, with each `=?` split.
SHOWN = EVIL.replace("=?", "= ?")
HEADERS = {"from", "to", "subject", "date", "message-id", "auto-submitted", "mime-version",
           "content-type"}  # fmt: skip
LIST_HEADERS = {"list-unsubscribe", "list-unsubscribe-post"}


@pytest.fixture(params=["eml", "smtp"])
def outlet(request: pytest.FixtureRequest) -> Iterator[SmtpSink | None]:
    """Where mail goes: .eml files (no SMTP server configured), or a real SMTP server."""
    if request.param == "eml":
        yield None
        return
    sink = SmtpSink().start()
    try:
        yield sink
    finally:
        sink.stop()


@pytest.fixture
def settings(settings: Settings, outlet: SmtpSink | None) -> Settings:
    settings.smtp_url = SecretStr(outlet.url) if outlet else None
    return settings


def arrived(settings: Settings, outlet: SmtpSink | None) -> dict[str, EmailMessage]:
    """Each mail that arrived, parsed by the standard library, by recipient."""
    if outlet is not None:
        return {r.recipients[0]: r.message for r in outlet.messages()}
    found: dict[str, EmailMessage] = {}
    for path in sorted(settings.mail_dir.glob("*.eml")):
        message = email.message_from_bytes(path.read_bytes(), policy=email.policy.default)
        assert isinstance(message, EmailMessage)
        if message["Subject"] != SIGN_UP_SUBJECT:  # as the sink leaves them out
            found[str(message["To"])] = message
    return found


def ctx_of(app: FastAPI) -> AppContext:
    ctx: AppContext = app.state.ctx
    return ctx


async def run_jobs(app: FastAPI) -> None:
    jobs = ctx_of(app).jobs
    assert jobs is not None
    await jobs.run_until_idle()


def body(message: EmailMessage, kind: str) -> str:
    part = message.get_body((kind,))
    assert part is not None
    return str(part.get_content()).replace("\r\n", "\n")  # type: ignore[attr-defined]


def assert_as_written(message: EmailMessage, subject: str, headers: set[str]) -> None:
    """The mail holds the headers Buildbay wrote, no others, and the parts it wrote."""
    assert "Reply-To" not in message
    assert {k.lower() for k in message} == headers
    assert str(message["Subject"]) == subject
    assert message.get_content_type() == "multipart/alternative"
    assert [p.get_content_type() for p in message.iter_parts()] == ["text/plain", "text/html"]


async def _store_names_as_before_the_rules(
    app: FastAPI,
    clock: FrozenClock,
    owner: Account,
    project: dict[str, Any],
    application: dict[str, Any],
) -> None:
    """Names as rows from before the door refused them (or a client that got past it)."""
    async with ctx_of(app).sessions() as db, db.begin():
        await db.execute(update(User).where(User.id == owner.user["id"]).values(name=EVIL))
        await db.execute(update(Project).where(Project.id == project["id"]).values(name=EVIL))
        await db.execute(
            update(Application).where(Application.id == application["id"]).values(name=EVIL)
        )
    clock.advance(seconds=ACCESS_CACHE_TTL.total_seconds() + 1)  # the caller's row, read again


async def test_names_holding_an_encoded_word_forge_no_header_of_an_invitation_or_new_build_mail(
    app: FastAPI,
    client: httpx.AsyncClient,
    api: Api,
    owner: Account,
    settings: Settings,
    outlet: SmtpSink | None,
    clock: FrozenClock,
) -> None:
    project = await api.project(owner)
    application = await api.application(owner, project["id"])
    tester = await api.register("tester@example.com")
    await api.add_member(owner, project["id"], tester, "tester")
    build = await api.upload(owner, project["id"], application["id"])
    await _store_names_as_before_the_rules(app, clock, owner, project, application)
    # The build's own version, as its file said it: metadata meets no request schema.
    async with ctx_of(app).sessions() as db, db.begin():
        await db.execute(
            update(Build)
            .where(Build.id == build["buildId"])
            .values(metadata_={"versionName": EVIL, "versionCode": 7})
        )

    r = await client.post(
        f"/api/projects/{project['id']}/invitations",
        json={"email": "carol@example.com", "role": "tester"},
        headers=owner.headers,
    )
    assert r.status_code == 201, r.text
    base = f"/api/app-distribution/{project['id']}/{application['id']}/builds"
    r = await client.post(
        f"{base}/{build['buildId']}/distribute",
        json={"emails": [tester.email], "notify": True},
        headers=owner.headers,
    )
    assert r.status_code == 200, r.text
    await run_jobs(app)

    mails = arrived(settings, outlet)
    assert set(mails) == {"carol@example.com", "tester@example.com"}
    invitation = mails["carol@example.com"]
    # Invitations carry the one-click link too: it blocks invitations to the address.
    assert_as_written(
        invitation, f"{SHOWN} invited you to {SHOWN} on Buildbay", HEADERS | LIST_HEADERS
    )
    assert body(invitation, "plain").startswith(
        f"{EVIL} invited you to the project {EVIL} on Buildbay, as tester.\n"
    )
    assert "/invitations/" in body(invitation, "html")
    new_build = mails["tester@example.com"]
    assert_as_written(new_build, f"{SHOWN} {SHOWN} (7) is ready to test", HEADERS | LIST_HEADERS)
    assert body(new_build, "plain").startswith(
        f"{EVIL} {EVIL} (7) is ready to install, in the project {EVIL} on Buildbay "
        f"(uploaded by {EVIL}).\n"
    )
    assert "/install/" in body(new_build, "html")


NAME_DOORS = [
    ("POST", "/api/auth/register", {"email": "eve@example.com", "password": "correct horse"}),
    ("PUT", "/api/auth/me", {}),
    ("POST", "/api/projects", {}),
    ("PUT", "/api/projects/{project}", {}),
    ("POST", "/api/projects/{project}/applications", {}),
    ("PUT", "/api/projects/{project}/applications/{application}", {}),
    ("POST", "/api/projects/{project}/groups", {}),
    ("POST", "/api/account/api-tokens", {}),
]


@pytest.mark.parametrize("outlet", ["eml"], indirect=True)
@pytest.mark.parametrize(("method", "path", "fields"), NAME_DOORS)
async def test_every_name_refuses_an_encoded_word_at_the_door(
    client: httpx.AsyncClient,
    api: Api,
    owner: Account,
    method: str,
    path: str,
    fields: dict[str, Any],
) -> None:
    project = await api.project(owner)
    application = await api.application(owner, project["id"])
    url = path.format(project=project["id"], application=application["id"])

    r = await client.request(method, url, json={**fields, "name": EVIL}, headers=owner.headers)

    problem = assert_problem(r, 422, "validation_error")
    assert problem["errors"] == [
        {"field": "name", "message": "contains '=?', which mail programs read as encoded text "
         "(RFC 2047)"}
    ]  # fmt: skip
    # A name with `=` and `?` apart is a name.
    r = await client.request(
        method, url, json={**fields, "name": "Q&A = ? fun"}, headers=owner.headers
    )
    assert r.status_code in (200, 201), r.text


@pytest.mark.parametrize("outlet", ["eml"], indirect=True)
async def test_list_unsubscribe_arrives_as_its_url_folded_and_never_encoded(
    app: FastAPI, client: httpx.AsyncClient, api: Api, owner: Account, settings: Settings
) -> None:
    """RFC 8058's one-click link must be read by mail providers as it is: Python encoded the
    long header as `=?utf-8?q?=3Chttp=3A//...?=`, which no provider reads as a URL."""
    project = await api.project(owner)
    application = await api.application(owner, project["id"])
    tester = await api.register("tester@example.com")
    await api.add_member(owner, project["id"], tester, "tester")
    build = await api.upload(owner, project["id"], application["id"])
    base = f"/api/app-distribution/{project['id']}/{application['id']}/builds"
    r = await client.post(
        f"{base}/{build['buildId']}/distribute",
        json={"emails": [tester.email], "notify": True},
        headers=owner.headers,
    )
    assert r.status_code == 200, r.text
    await run_jobs(app)

    [raw] = [
        text
        for text in (path.read_text() for path in settings.mail_dir.glob("*.eml"))
        if f"Subject: {SIGN_UP_SUBJECT}" not in text  # the sign-ups' verification mails
    ]
    message = email.message_from_string(raw, policy=email.policy.default)
    assert isinstance(message, EmailMessage)
    [url] = [line for line in body(message, "plain").splitlines() if "/unsubscribe/" in line]
    assert url.startswith("http://testserver/unsubscribe/")
    assert str(message["List-Unsubscribe"]).strip() == f"<{url}>"
    assert message["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
    [header] = [h for h in raw.split("\n\n")[0].replace("\n ", " ").splitlines()
                if h.startswith("List-Unsubscribe:")]  # fmt: skip
    assert "=?" not in header
    assert header.split(None, 1)[1] == f"<{url}>"


@pytest.mark.parametrize("outlet", ["eml"], indirect=True)
async def test_the_consoles_name_fields_refuse_an_encoded_word_and_say_why(
    app: FastAPI, api: Api, owner: Account
) -> None:
    import re
    from html import unescape

    said = "The name contains '=?', which mail programs read as encoded text (RFC 2047)."
    origin = {"Origin": BASE_URL}
    transport = httpx.ASGITransport(app=app)
    https = BASE_URL.replace("http://", "https://")
    async with httpx.AsyncClient(transport=transport, base_url=https) as browser:

        async def refused(page: str, path: str, form: dict[str, str]) -> list[str]:
            found = re.search(r'name="csrf" value="([^"]+)"', (await browser.get(page)).text)
            assert found
            r = await browser.post(path, data={"csrf": found.group(1), **form}, headers=origin)
            assert r.status_code == 422, r.text[:300]
            errors = re.findall(r'<p class="error[^"]*"[^>]*role="alert">(.*?)</p>', r.text)
            return [unescape(e).strip() for e in errors]

        signup = {"email": "eve@example.com", "password": "correct horse", "name": EVIL}
        assert await refused("/signup", "/signup", signup) == [said]
        found = re.search(r'name="csrf" value="([^"]+)"', (await browser.get("/login")).text)
        assert found
        r = await browser.post("/login", headers=origin, data={
            "csrf": found.group(1), "email": owner.email, "password": owner.password,
        })  # fmt: skip
        assert r.status_code == 303
        assert await refused("/projects", "/projects", {"name": EVIL}) == [said]
        project = await api.project(owner)
        groups = f"/projects/{project['id']}/groups"
        assert await refused(groups, groups, {"name": EVIL}) == [said]

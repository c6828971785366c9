"""Every response carries the security headers: a Content-Security-Policy that runs no inline
script (the docs' own policy lets Swagger UI start), no framing, no sniffing, no referrer to
other sites. The pages Buildbay writes have no inline script, handler or style to need more."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

import buildbay
from buildbay.config import Settings, StorageKind
from buildbay.security_headers import SecurityHeaders
from tests.conftest import Account, Api

TEMPLATES = Path(buildbay.__file__).parent / "templates"
INLINE = {
    "an inline script": re.compile(r"<script(?![^>]*\bsrc=)", re.IGNORECASE),
    "an event handler attribute": re.compile(r"\son[a-z]+\s*=", re.IGNORECASE),
    "an inline style": re.compile(r"<style|\sstyle\s*=", re.IGNORECASE),
    "a javascript: URL": re.compile(r"javascript:", re.IGNORECASE),
}


def policy(response: httpx.Response) -> dict[str, str]:
    header = response.headers["content-security-policy"]
    directives = {}
    for part in header.split(";"):
        name, _, value = part.strip().partition(" ")
        directives[name] = value
    return directives


def assert_security_headers(response: httpx.Response) -> dict[str, str]:
    assert response.headers["x-frame-options"] == "DENY"
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["referrer-policy"] == "same-origin"
    directives = policy(response)
    assert directives["frame-ancestors"] == "'none'"
    assert directives["object-src"] == "'none'"
    assert directives["base-uri"] == "'none'"
    return directives


def assert_strict(response: httpx.Response) -> None:
    directives = assert_security_headers(response)
    assert directives["script-src"] == "'self'"
    assert directives["style-src"] == "'self'"
    assert directives["default-src"] == "'none'"
    assert "unsafe" not in response.headers["content-security-policy"]


MAILS = TEMPLATES / "mail"
PAGES = sorted(p for p in TEMPLATES.rglob("*.html") if MAILS not in p.parents)


@pytest.mark.parametrize("template", PAGES, ids=lambda p: p.name)
def test_no_template_has_inline_script_handlers_or_styles(template: Path) -> None:
    text = template.read_text()
    for what, pattern in INLINE.items():
        assert not pattern.search(text), f"{template.name} has {what}"


# Mails are not pages of this site: no policy reaches a mail client, and mail clients drop
# stylesheets, so their HTML styles itself inline. It still runs nothing and loads nothing.
MAIL_FORBIDDEN = {
    "a script": re.compile(r"<script", re.IGNORECASE),
    "an event handler attribute": re.compile(r"\son[a-z]+\s*=", re.IGNORECASE),
    "a javascript: URL": re.compile(r"javascript:", re.IGNORECASE),
    "an image (a remote one would track the reader)": re.compile(r"<img", re.IGNORECASE),
    "a stylesheet or font to fetch": re.compile(r"<link|@import|url\(", re.IGNORECASE),
}


@pytest.mark.parametrize("template", sorted(MAILS.rglob("*.html")), ids=lambda p: p.name)
def test_no_mail_template_runs_or_loads_anything(template: Path) -> None:
    text = template.read_text()
    for what, pattern in MAIL_FORBIDDEN.items():
        assert not pattern.search(text), f"{template.name} has {what}"


async def test_console_pages_and_static_files_have_the_strict_policy(
    client: httpx.AsyncClient,
) -> None:
    for path in ("/login", "/signup", "/static/console.js", "/static/install.css", "/nowhere"):
        r = await client.get(path, headers={"Accept": "text/html"})
        assert r.status_code in (200, 404), (path, r.status_code)
        assert_strict(r)


async def test_api_json_and_early_refusals_have_them_too(
    client: httpx.AsyncClient, owner: Account
) -> None:
    r = await client.get("/api/auth/me", headers=owner.headers)
    assert r.status_code == 200
    assert_strict(r)
    assert_strict(await client.get("/api/auth/me"))  # 401
    # Refused by the middleware before any route runs.
    r = await client.post("/api/projects", content=b"x", headers={"Content-Type": "text/plain"})
    assert r.status_code == 400
    assert_strict(r)


async def test_storage_responses_have_them(
    client: httpx.AsyncClient, api: Api, owner: Account
) -> None:
    project = await api.project(owner)
    application = await api.application(owner, project["id"])
    base = f"/api/app-distribution/{project['id']}/{application['id']}/builds"
    r = await client.post(
        f"{base}/upload-link", json={"fileName": "a.apk", "fileSize": 5}, headers=owner.headers
    )
    link = r.json()
    r = await client.put(link["uploadUrl"], content=b"12345", headers=link["uploadHeaders"])
    assert r.status_code == 200, r.text
    assert_strict(r)
    r = await client.post(
        f"{base}/verify", json={"buildId": link["buildId"]}, headers=owner.headers
    )
    assert r.status_code == 200, r.text
    r = await client.get(f"{base}/{link['buildId']}/download", headers=owner.headers)
    assert r.status_code == 302
    r = await client.get(r.headers["location"])
    assert r.status_code == 200
    assert r.content == b"12345"
    assert_strict(r)


async def test_the_docs_have_a_policy_that_lets_swagger_ui_start(
    client: httpx.AsyncClient,
) -> None:
    for path in ("/docs", "/redoc"):
        r = await client.get(path)
        assert r.status_code == 200
        directives = assert_security_headers(r)
        assert directives["script-src"] == "'self' 'unsafe-inline'"
    # Its own files are the strict kind's.
    assert_strict(await client.get("/openapi.json"))


def test_the_console_may_upload_straight_to_the_bucket(settings: Settings) -> None:
    s3 = settings.model_copy(
        update={
            "storage": StorageKind.S3,
            "s3_bucket": "builds",
            "s3_endpoint_url": "https://minio.example.com:9000/",
        }
    )
    headers = dict(SecurityHeaders(s3).for_path("/projects"))
    assert (
        "connect-src 'self' https://minio.example.com:9000;" in headers["Content-Security-Policy"]
    )
    aws = s3.model_copy(update={"s3_endpoint_url": None})
    headers = dict(SecurityHeaders(aws).for_path("/projects"))
    assert "connect-src 'self' https://*.amazonaws.com;" in headers["Content-Security-Policy"]

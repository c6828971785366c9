"""From invitation to install in a real browser, against a real server mailing a real SMTP
server: a developer adds an e-mail that has no account to a tester group (which invites it),
the tester signs up from the mail and joins the project and the group; the developer
distributes a build to the group from the console; the tester installs it from the link in
their own mail, and the build's page shows that they did."""

from __future__ import annotations

import re
from collections.abc import Callable

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.builds.android_files import APK
from tests.console.test_console import PASSWORD, sign_up
from tests.smtp import SmtpSink, smtp

__all__ = ["smtp"]
pytestmark = pytest.mark.slow

NewPage = Callable[[str], Page]


@pytest.fixture
def server_env(server_env: dict[str, str], smtp: SmtpSink) -> dict[str, str]:
    return server_env | {"BUILDBAY_SMTP_URL": smtp.url, "BUILDBAY_MAIL_FROM": "builds@example.com"}


def _ready_build(server: str, email: str, project_id: str, app_id: str) -> str:
    """A ready build of the application, uploaded as CI would (through the API)."""
    with httpx.Client(base_url=server, timeout=30) as http:
        login = http.post("/api/auth/login", json={"email": email, "password": PASSWORD})
        headers = {"Authorization": f"Bearer {login.json()['access_token']}"}
        base = f"/api/app-distribution/{project_id}/{app_id}/builds"
        data = APK.read_bytes()
        link = http.post(
            f"{base}/upload-link",
            json={"fileName": "demo.apk", "fileSize": len(data)},
            headers=headers,
        ).json()
        assert http.put(link["uploadUrl"], content=data, headers=link["uploadHeaders"]).is_success
        r = http.post(f"{base}/verify", json={"buildId": link["buildId"]}, headers=headers)
        assert r.status_code == 200, r.text
        return str(link["buildId"])


def test_an_invited_tester_installs_a_build_distributed_to_their_group(
    server: str, new_page: NewPage, smtp: SmtpSink
) -> None:
    dev = new_page(server)
    sign_up(dev, "dana@example.com", "Dana")
    dev.get_by_label("Project name").fill("Acme")
    dev.get_by_role("button", name="Create project").click()
    expect(dev.get_by_role("heading", level=1)).to_have_text("Acme")
    project_id = dev.url.rstrip("/").rsplit("/", 1)[1]
    dev.get_by_label("Application name").fill("Acme Android")
    dev.get_by_role("button", name="Add application").click()
    expect(dev.get_by_role("heading", level=1)).to_have_text("Acme Android")
    app_id = dev.url.rstrip("/").rsplit("/", 1)[1]

    # A group, and a tester who has no account yet: invited by adding them.
    dev.goto(f"/projects/{project_id}")
    dev.get_by_role("link", name="Tester groups").click()
    dev.get_by_label("Group name").fill("QA")
    dev.get_by_role("button", name="Create group").click()
    expect(dev.get_by_text("Group QA created.")).to_be_visible()
    qa = dev.locator("section.group", has=dev.get_by_role("heading", name=re.compile("^QA")))
    qa.get_by_label("Add testers by e-mail").fill("tess@example.com")
    qa.get_by_role("button", name="Add").click()
    expect(dev.get_by_text(re.compile("Invited tess@example.com"))).to_be_visible()

    [invitation] = smtp.wait_for(1)
    assert invitation.recipients == ["tess@example.com"]
    tess = new_page(server)
    tess.goto(invitation.link("http"))
    tess.get_by_role("link", name="Create an account").click()
    tess.get_by_label("Password").fill(PASSWORD)
    tess.get_by_role("button", name="Create account").click()
    tess.get_by_role("button", name="Accept and join Acme").click()
    expect(tess.get_by_text("Welcome: you are a member of this project now.")).to_be_visible()
    dev.reload()
    expect(qa.get_by_role("cell", name="tess@example.com", exact=True)).to_be_visible()

    # Builds of this application go to nobody by themselves; Dana distributes to QA.
    with httpx.Client(base_url=server, timeout=30) as http:
        login = http.post(
            "/api/auth/login", json={"email": "dana@example.com", "password": PASSWORD}
        )
        r = http.put(
            f"/api/projects/{project_id}/applications/{app_id}",
            json={"autoDistributeGroups": []},
            headers={"Authorization": f"Bearer {login.json()['access_token']}"},
        )
        assert r.status_code == 200, r.text
    build_id = _ready_build(server, "dana@example.com", project_id, app_id)
    dev.goto(f"/projects/{project_id}/apps/{app_id}")
    dev.get_by_role("link", name="Details of demo.apk").click()
    expect(dev.get_by_text("Nobody has this build yet.")).to_be_visible()
    dev.get_by_label("QA (1 tester)").check()
    dev.get_by_role("button", name="Distribute").click()
    expect(dev.get_by_text("Distributed: 1 tester reached; 1 mailed.")).to_be_visible()

    [_, news] = smtp.wait_for(2)
    assert news.recipients == ["tess@example.com"]
    assert news.message["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
    install = news.link(f"{server}/install/")
    tess.goto(install)
    with tess.expect_download() as download:
        tess.get_by_role("link", name=re.compile("Download demo.apk")).click()
    assert download.value.suggested_filename == "demo.apk"

    dev.reload()
    row = dev.locator("table.installs tr", has=dev.get_by_text("tess@example.com"))
    expect(row.locator("td.downloads")).to_have_text("1")
    expect(row.locator("td").nth(3)).not_to_have_text("—")
    assert build_id in dev.url

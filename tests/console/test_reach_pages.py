"""Invitations and reach in a real browser, against a real server mailing a real SMTP server
(issue 36). The lead's day: a group with two testers and a person not signed up yet, a resend,
a distribution that says "2 testers reached, 1 invitation pending, 1 unsubscribed from mail",
and a build page that says to whom it went, by whom and when, and whose each personal link is.
The invited person's day: the first mail's link still works after the resend and, once they
join, the newest build is in their mail; a signed-in person answers their invitations from
their projects page; a link no longer valid tells someone without an account what to do."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.builds.android_files import APK
from tests.console.test_console import PASSWORD, sign_up
from tests.smtp import SIGN_UP_SUBJECT, SmtpSink, smtp

__all__ = ["smtp"]
pytestmark = pytest.mark.slow

NewPage = Callable[[str], Page]


@pytest.fixture
def http(server: str) -> Iterator[Http]:
    with httpx.Client(base_url=server, timeout=30) as client:
        yield Http(client)


@pytest.fixture
def server_env(server_env: dict[str, str], smtp: SmtpSink) -> dict[str, str]:
    return server_env | {"BUILDBAY_SMTP_URL": smtp.url, "BUILDBAY_MAIL_FROM": "builds@example.com"}


class Http:
    """What is set up through the API, as CI or a script would: not the pages under test."""

    def __init__(self, client: httpx.Client) -> None:
        self.client = client

    def login(self, email: str) -> dict[str, str]:
        r = self.client.post("/api/auth/login", json={"email": email, "password": PASSWORD})
        assert r.status_code == 200, r.text
        return {"Authorization": f"Bearer {r.json()['access_token']}"}

    def register(self, email: str, name: str) -> dict[str, Any]:
        r = self.client.post(
            "/api/auth/register", json={"email": email, "password": PASSWORD, "name": name}
        )
        assert r.status_code == 201, r.text
        return dict(r.json())

    def call(self, method: str, url: str, headers: dict[str, str], **kwargs: Any) -> Any:
        r = self.client.request(method, url, headers=headers, **kwargs)
        assert r.is_success, r.text
        return r.json() if r.content else None

    def ready_build(self, headers: dict[str, str], project_id: str, app_id: str) -> str:
        base = f"/api/app-distribution/{project_id}/{app_id}/builds"
        data = APK.read_bytes()
        link = self.call("POST", f"{base}/upload-link", headers,
                         json={"fileName": "demo.apk", "fileSize": len(data)})  # fmt: skip
        assert self.client.put(
            link["uploadUrl"], content=data, headers=link["uploadHeaders"]
        ).is_success
        self.call("POST", f"{base}/verify", headers, json={"buildId": link["buildId"]})
        return str(link["buildId"])


def _verification_link(smtp: SmtpSink, email: str) -> str:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for mail in smtp.messages(sign_ups=True):
            if mail.recipients == [email] and mail.message["Subject"] == SIGN_UP_SUBJECT:
                return mail.link("http")
        time.sleep(0.02)
    pytest.fail(f"no verification mail to {email}")


def _mails_to(smtp: SmtpSink, email: str, count: int) -> list[Any]:
    deadline = time.monotonic() + 60
    while len(found := [m for m in smtp.messages() if m.recipients == [email]]) < count:
        if time.monotonic() > deadline:
            pytest.fail(f"{len(found)} of {count} mails to {email} arrived")
        time.sleep(0.02)
    return found


def test_the_leads_distribution_reaches_testers_and_a_person_who_joins_from_the_first_mail(
    server: str, new_page: NewPage, smtp: SmtpSink, http: Http
) -> None:
    lead = new_page(server)
    sign_up(lead, "lena@example.com", "Lena")
    lead.get_by_label("Project name").fill("Acme")
    lead.get_by_role("button", name="Create project").click()
    project_id = lead.url.rstrip("/").rsplit("/", 1)[1]
    lead.get_by_label("Application name").fill("Acme Android")
    lead.get_by_role("button", name="Add application").click()
    expect(lead.get_by_role("heading", level=1)).to_have_text("Acme Android")
    app_id = lead.url.rstrip("/").rsplit("/", 1)[1]

    lena = http.login("lena@example.com")
    for email, name in (("tess@example.com", "Tess"), ("quinn@example.com", "Quinn")):
        http.register(email, name)
        http.call("POST", f"/api/projects/{project_id}/members", lena,
                  json={"email": email, "role": "tester"})  # fmt: skip
    http.call("PUT", "/api/auth/me", http.login("quinn@example.com"),
              json={"notifyNewBuilds": False})  # fmt: skip
    http.call("PUT", f"/api/projects/{project_id}/applications/{app_id}", lena,
              json={"autoDistributeGroups": []})  # fmt: skip

    # A group of the two testers and Tom, who has no account: he is invited.
    lead.goto(f"/projects/{project_id}/groups")
    lead.get_by_label("Group name").fill("QA")
    lead.get_by_role("button", name="Create group").click()
    qa = lead.locator("section.group", has=lead.get_by_role("heading", name=re.compile("^QA")))
    qa.get_by_label("Add testers by e-mail").fill(
        "tess@example.com, quinn@example.com, tom@example.com"
    )
    qa.get_by_role("button", name="Add").click()
    expect(lead.get_by_text(re.compile("invited tom@example.com"))).to_be_visible()
    [first] = _mails_to(smtp, "tom@example.com", 1)

    # Tom did not see it: Lena sends it again; the first mail's link keeps working.
    lead.goto(f"/projects/{project_id}")
    lead.get_by_role("button", name="Resend").click()
    expect(lead.get_by_text("The link of the earlier mail still works.")).to_be_visible()
    _mails_to(smtp, "tom@example.com", 2)

    build_id = http.ready_build(lena, project_id, app_id)
    lead.goto(f"/projects/{project_id}/apps/{app_id}/builds/{build_id}")
    expect(lead.locator("#reach")).to_contain_text("Not distributed yet.")
    lead.get_by_label("QA (2 testers)").check()
    lead.get_by_role("button", name="Distribute").click()
    expect(
        lead.get_by_text(
            "Distributed: 2 testers reached, 1 invitation pending, 1 unsubscribed from mail; "
            "1 mailed."
        )
    ).to_be_visible()
    reach = lead.locator("#reach")
    row = reach.locator("table.distributed tr", has=lead.get_by_text("Group QA"))
    expect(row.locator("td").nth(1)).to_have_text("Lena")
    expect(row.locator("time")).to_have_count(1)
    expect(reach.locator("ul.invited")).to_have_text(
        re.compile(r"tom@example\.com\s+invited, not signed up yet")
    )

    # Tom opens the first mail, signs up and joins: the build is in his mail then.
    tom = new_page(server)
    tom.goto(first.link("http"))
    expect(tom.get_by_role("heading", level=1)).to_have_text("Join Acme")
    tom.get_by_role("link", name="Create an account").click()
    tom.get_by_label("Password").fill(PASSWORD)
    tom.get_by_role("button", name="Create account").click()
    tom.get_by_role("button", name="Accept and join Acme").click()
    expect(tom.get_by_text("Welcome: you are a member of this project now.")).to_be_visible()
    _, _, news = _mails_to(smtp, "tom@example.com", 3)
    assert "ready to test" in str(news.message["Subject"])
    tom.goto(news.link(f"{server}/install/"))
    expect(tom.get_by_role("link", name=re.compile("Download demo.apk"))).to_be_visible()

    lead.reload()
    expect(reach.locator("#reach-summary")).to_contain_text("3 testers reached")
    expect(reach.locator("ul.invited")).to_have_count(0)
    link_row = lead.locator("table.links tr", has=lead.get_by_text("tom@example.com"))
    expect(link_row.locator("td.owner")).to_contain_text("tom@example.com")
    expect(link_row.locator("td.owner")).to_contain_text("(personal)")


def test_an_invited_person_answers_from_their_projects_page_and_a_dead_link_says_what_to_do(
    server: str, new_page: NewPage, smtp: SmtpSink, http: Http
) -> None:
    http.register("lena@example.com", "Lena")
    lena = http.login("lena@example.com")
    acme = http.call("POST", "/api/projects", lena, json={"name": "Acme"})
    zeta = http.call("POST", "/api/projects", lena, json={"name": "Zeta"})
    for project in (acme, zeta):
        http.call("POST", f"/api/projects/{project['id']}/invitations", lena,
                  json={"email": "vera@example.com", "role": "tester"})  # fmt: skip
    zeta_mail = next(
        m for m in _mails_to(smtp, "vera@example.com", 2) if "Zeta" in str(m.message["Subject"])
    )

    vera = new_page(server)
    sign_up(vera, "vera@example.com", "Vera")
    # Not verified yet: the page says an invitation waits, not whose.
    expect(vera.locator("#received-invitations")).to_contain_text("An invitation for")
    expect(vera.locator("#received-invitations")).not_to_contain_text("Zeta")
    vera.goto(_verification_link(smtp, "vera@example.com"))
    vera.get_by_role("button", name="Confirm my e-mail address").click()
    vera.get_by_role("link", name="Go to your projects").click()
    received = vera.locator("#received-invitations")
    expect(received.locator("li")).to_have_count(2)
    expect(received).to_contain_text("Zeta: Lena invited you as tester.")

    zeta_item = received.locator("li", has_text="Zeta")
    vera.once("dialog", lambda dialog: dialog.accept())
    zeta_item.get_by_role("button", name="Decline").click()
    expect(vera.get_by_text("Invitation declined.")).to_be_visible()
    expect(received.locator("li")).to_have_count(1)
    received.get_by_role("button", name="Accept and join Acme").click()
    expect(vera.get_by_text("Welcome: you are a member of this project now.")).to_be_visible()
    expect(vera.get_by_role("heading", level=1)).to_have_text("Acme")
    vera.goto("/projects")
    expect(vera.locator("#received-invitations")).to_have_count(0)

    # Someone without an account opens the declined invitation's link, then a dead one.
    stranger = new_page(server)
    stranger.goto(zeta_mail.link("http"))
    expect(stranger.locator("#invitation-state")).to_contain_text("This invitation was declined.")
    expect(stranger.locator("#what-to-do")).to_contain_text("ask Lena to send the invitation again")
    expect(stranger.locator("#what-to-do")).to_contain_text("You do not need an account yet")
    stranger.goto(f"{server}/invitations/bbi_not-a-link-this-server-sent")
    expect(stranger.get_by_role("heading", level=1)).to_have_text(
        "This invitation link is not valid"
    )
    expect(stranger.locator("#invitation-gone")).to_contain_text(
        "send the invitation again from the project's page"
    )
    expect(stranger.get_by_text("Back to your projects")).to_have_count(0)

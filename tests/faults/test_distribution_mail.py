"""A build distributed to a group through a real `buildbay serve` and a real SMTP server, the
server killed (SIGKILL) while the group's mails are on the wire: after the restart every tester
has exactly one mail, with their own install link (see test_mail.py for what "once" means)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import httpx
import pytest

from tests.faults.conftest import DATABASE_POLL, Server, wait_for
from tests.faults.test_mail import FAST_JOBS, POLL_SECONDS, assert_each_once, job_statuses
from tests.smtp import SmtpSink, smtp

__all__ = ["smtp"]
pytestmark = [pytest.mark.slow, pytest.mark.faults]

TESTERS = 10


def test_a_server_killed_while_a_group_is_mailed_loses_no_mail_and_sends_none_twice(
    server_env: dict[str, str], servers: Callable[..., Server], smtp: SmtpSink, database_url: str
) -> None:
    server = servers(server_env | FAST_JOBS | {"BUILDBAY_SMTP_URL": smtp.url}).start()
    http = httpx.Client(base_url=server.base, timeout=30)
    emails = [f"tester{n}@example.com" for n in range(TESTERS)]
    for email in emails:
        r = http.post("/api/auth/register", json={"email": email, "password": "a long password"})
        assert r.status_code == 201, r.text
    r = http.post("/api/auth/register", json={"email": "dana@example.com",
                                              "password": "a long password"})  # fmt: skip
    headers = {"Authorization": f"Bearer {r.json()['access_token']}"}
    project = http.post("/api/projects", json={"name": "Acme"}, headers=headers).json()["id"]
    for email in emails:
        r = http.post(f"/api/projects/{project}/members",
                      json={"email": email, "role": "tester"}, headers=headers)  # fmt: skip
        assert r.status_code == 201, r.text
    app = http.post(
        f"/api/projects/{project}/applications",
        json={"name": "App", "autoDistributeGroups": []},
        headers=headers,
    ).json()["id"]
    group = http.post(f"/api/projects/{project}/groups", json={"name": "QA"}, headers=headers)
    qa = group.json()["id"]
    r = http.post(f"/api/projects/{project}/groups/{qa}/testers", json={"emails": emails},
                  headers=headers)  # fmt: skip
    assert r.status_code == 200, r.text
    builds = f"/api/app-distribution/{project}/{app}/builds"
    link = http.post(f"{builds}/upload-link", json={"fileName": "a.apk", "fileSize": 5},
                     headers=headers).json()  # fmt: skip
    assert http.put(link["uploadUrl"], content=b"build", headers=link["uploadHeaders"]).is_success
    r = http.post(f"{builds}/verify", json={"buildId": link["buildId"]}, headers=headers)
    assert r.status_code == 200, r.text

    smtp.hold()
    r = http.post(f"{builds}/{link['buildId']}/distribute", json={"groups": [qa]},
                  headers=headers)  # fmt: skip
    assert r.status_code == 200, r.text
    assert r.json()["notified"] == TESTERS
    wait_for(lambda: smtp.held > 0, "a mail of the group on the wire")
    server.kill()
    smtp.release()
    http.close()

    server.start()
    smtp.wait_for(TESTERS, timeout=POLL_SECONDS)
    wait_for(lambda: job_statuses(database_url) == Counter({"done": TESTERS}),
             "every mail recorded as done", interval=DATABASE_POLL)  # fmt: skip
    assert_each_once(smtp, emails)
    links = {m.link(f"{server.base}/install/") for m in smtp.messages()}
    assert len(links) == TESTERS  # each tester's own

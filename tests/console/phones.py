"""What the browser tests of testers on phones set up through a real server's API: Olga's
project "Acme" with its iOS application "Acme iOS", testers of its, and real .ipa builds
uploaded and distributed to them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx

from tests.builds.test_metadata import ipa
from tests.console.test_console import PASSWORD


def account(http: httpx.Client, email: str, name: str) -> dict[str, str]:
    """A registered account's headers."""
    r = http.post("/api/auth/register", json={"email": email, "password": PASSWORD, "name": name})
    assert r.status_code == 201, r.text
    return {"Authorization": f"Bearer {r.json()['access_token']}"}


@dataclass
class Acme:
    project_id: str
    app_id: str
    owner: dict[str, str]
    testers: list[dict[str, str]]  # their headers, in the order given to `acme`

    @property
    def builds(self) -> str:
        return f"/api/app-distribution/{self.project_id}/{self.app_id}/builds"

    def upload(self, http: httpx.Client, notes: str) -> str:
        """A ready .ipa build with these notes, given to nobody yet; its id."""
        data = ipa().getvalue()
        link = http.post(
            f"{self.builds}/upload-link",
            json={"fileName": "Example.ipa", "fileSize": len(data)},
            headers=self.owner,
        )
        assert link.status_code in (200, 201), link.text
        body: dict[str, Any] = link.json()
        assert http.put(body["uploadUrl"], content=data, headers=body["uploadHeaders"]).is_success
        r = http.post(
            f"{self.builds}/verify",
            json={"buildId": body["buildId"], "notes": notes},
            headers=self.owner,
        )
        assert r.status_code == 200, r.text
        return str(body["buildId"])

    def distribute(self, http: httpx.Client, build_id: str, email: str, *, notify: bool) -> None:
        r = http.post(
            f"{self.builds}/{build_id}/distribute",
            json={"emails": [email], "notify": notify},
            headers=self.owner,
        )
        assert r.status_code == 200, r.text


def acme(http: httpx.Client, *testers: tuple[str, str]) -> Acme:
    """Olga's (olga@example.com) project with its iOS application, which distributes to no
    group by itself, and `testers` (e-mail, name) registered and made its testers."""
    owner = account(http, "olga@example.com", "Olga")
    headers = [account(http, email, name) for email, name in testers]
    project = http.post("/api/projects", json={"name": "Acme"}, headers=owner).json()
    app = http.post(
        f"/api/projects/{project['id']}/applications",
        json={"name": "Acme iOS", "platform": "ios", "autoDistributeGroups": []},
        headers=owner,
    )
    assert app.status_code == 201, app.text
    for email, _ in testers:
        r = http.post(
            f"/api/projects/{project['id']}/members",
            json={"email": email, "role": "tester"},
            headers=owner,
        )
        assert r.status_code == 201, r.text
    return Acme(project["id"], app.json()["id"], owner, headers)

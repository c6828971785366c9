"""Invitations over HTTP, with their mails read from a real SMTP server: invite, resend,
revoke, list, accept (as the invited e-mail only, once, within 7 days)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from pydantic import SecretStr

from buildbay.clock import FrozenClock
from buildbay.config import Settings
from buildbay.deps import AppContext
from tests.conftest import Account, Api, assert_problem, iso_z
from tests.smtp import SmtpSink, smtp

__all__ = ["smtp"]
ACCEPT = "/api/invitations/accept"


@pytest.fixture
def settings(settings: Settings, smtp: SmtpSink) -> Settings:
    settings.smtp_url = SecretStr(smtp.url)
    return settings


@pytest.fixture
async def project(api: Api, owner: Account) -> dict[str, Any]:
    return await api.project(owner, "Acme")


class Invites:
    """The steps, as the product's users take them."""

    def __init__(self, client: httpx.AsyncClient, app: FastAPI, smtp: SmtpSink) -> None:
        self.client, self.app, self.smtp = client, app, smtp

    async def send(
        self, account: Account, project_id: str, email: str, role: str = "tester"
    ) -> tuple[dict[str, Any], str]:
        """Invite; run the outbox; the invitation and the token of the link in its mail."""
        before = len(self.smtp.messages())
        r = await self.client.post(
            f"/api/projects/{project_id}/invitations",
            json={"email": email, "role": role},
            headers=account.headers,
        )
        assert r.status_code == 201, r.text
        ctx: AppContext = self.app.state.ctx
        assert ctx.jobs is not None
        await ctx.jobs.run_until_idle()
        [mail] = self.smtp.messages()[before:]
        link = mail.link("http")
        assert link.startswith("http://testserver/invitations/bbi_")
        return r.json(), link.rsplit("/", 1)[1]

    async def accept(self, account: Account, token: str) -> httpx.Response:
        return await self.client.post(ACCEPT, json={"token": token}, headers=account.headers)

    async def listed(self, account: Account, project_id: str) -> list[dict[str, Any]]:
        r = await self.client.get(
            f"/api/projects/{project_id}/invitations", headers=account.headers
        )
        assert r.status_code == 200, r.text
        invitations: list[dict[str, Any]] = r.json()["invitations"]
        return invitations


@pytest.fixture
def invites(client: httpx.AsyncClient, app: FastAPI, smtp: SmtpSink) -> Invites:
    return Invites(client, app, smtp)


async def test_an_invited_email_signs_up_accepts_and_is_a_member_with_the_role(
    invites: Invites, api: Api, owner: Account, project: dict[str, Any], smtp: SmtpSink,
    client: httpx.AsyncClient, clock: FrozenClock,
) -> None:  # fmt: skip
    invitation, token = await invites.send(owner, project["id"], "CAROL@example.com", "developer")

    assert invitation == {
        "id": invitation["id"],
        "email": "carol@example.com",
        "role": "developer",
        "status": "pending",
        "invitedBy": owner.user["id"],
        "createdAt": iso_z(clock.now()),
        "expiresAt": iso_z(clock.now() + timedelta(days=7)),
    }
    assert invitation["id"].startswith("inv_")
    [mail] = smtp.messages()
    assert mail.recipients == ["carol@example.com"]
    assert mail.message["Subject"] == f"{owner.user['name']} invited you to Acme on Buildbay"
    assert "as developer" in mail.text

    carol = await api.register("carol@example.com")
    r = await invites.accept(carol, token)

    assert r.status_code == 200, r.text
    assert r.json() == {"userId": carol.user["id"], "email": "carol@example.com",
                        "name": carol.user["name"], "role": "developer",
                        "createdAt": iso_z(clock.now()),
                        "emailVerified": True}  # the mailed link proved it  # fmt: skip
    r = await client.get(f"/api/projects/{project['id']}", headers=carol.headers)
    assert r.status_code == 200
    [listed] = await invites.listed(owner, project["id"])
    assert listed["status"] == "accepted"
    assert_problem(await invites.accept(carol, token), 422, "invitation_expired")


async def test_only_the_invited_email_may_accept(
    invites: Invites, api: Api, owner: Account, project: dict[str, Any]
) -> None:
    _, token = await invites.send(owner, project["id"], "carol@example.com")
    mallory = await api.register("mallory@example.com")

    problem = assert_problem(await invites.accept(mallory, token), 403, "invitation_email_mismatch")
    assert "carol@example.com" in problem["detail"]
    [listed] = await invites.listed(owner, project["id"])
    assert listed["status"] == "pending"
    assert_problem(await invites.accept(mallory, "bbi_not-a-token"), 404, "invitation_not_found")


async def test_inviting_again_sends_a_new_mail_and_the_first_mails_link_still_works(
    invites: Invites, api: Api, owner: Account, project: dict[str, Any]
) -> None:
    first, old = await invites.send(owner, project["id"], "carol@example.com", "tester")
    again, new = await invites.send(owner, project["id"], "carol@example.com", "admin")

    assert again["id"] == first["id"]
    assert again["role"] == "admin"
    assert new != old
    carol = await api.register("carol@example.com")
    r = await invites.accept(carol, old)  # the first mail's link: the same invitation
    assert r.status_code == 200, r.text
    assert r.json()["role"] == "admin"
    assert_problem(await invites.accept(carol, new), 422, "invitation_expired")  # taken
    assert len(await invites.listed(owner, project["id"])) == 1


async def test_a_revoked_or_expired_invitation_cannot_be_accepted(
    invites: Invites, api: Api, owner: Account, project: dict[str, Any],
    client: httpx.AsyncClient, clock: FrozenClock,
) -> None:  # fmt: skip
    revoked, revoked_token = await invites.send(owner, project["id"], "carol@example.com")
    _, late_token = await invites.send(owner, project["id"], "dave@example.com")
    carol = await api.register("carol@example.com")
    dave = await api.register("dave@example.com")
    url = f"/api/projects/{project['id']}/invitations/{revoked['id']}"

    r = await client.delete(url, headers=owner.headers)
    assert r.status_code == 204
    assert (await client.delete(url, headers=owner.headers)).status_code == 204
    assert_problem(await invites.accept(carol, revoked_token), 422, "invitation_expired")
    clock.advance(days=7)
    dave = await api.login(dave)  # a day's access token has long expired
    assert_problem(await invites.accept(dave, late_token), 422, "invitation_expired")

    owner = await api.login(owner)
    statuses = {i["email"]: i["status"] for i in await invites.listed(owner, project["id"])}
    assert statuses == {"carol@example.com": "revoked", "dave@example.com": "expired"}
    r = await client.delete(url.replace(revoked["id"], "inv_00000000000000000000000000"),
                            headers=owner.headers)  # fmt: skip
    assert_problem(r, 404, "invitation_not_found")


async def test_an_accepted_invitation_cannot_be_revoked(
    invites: Invites, api: Api, owner: Account, project: dict[str, Any], client: httpx.AsyncClient
) -> None:
    invitation, token = await invites.send(owner, project["id"], "carol@example.com")
    carol = await api.register("carol@example.com")
    assert (await invites.accept(carol, token)).status_code == 200

    r = await client.delete(
        f"/api/projects/{project['id']}/invitations/{invitation['id']}", headers=owner.headers
    )
    assert_problem(r, 409, "invitation_accepted")


async def test_members_are_not_invited_and_an_accept_by_a_member_changes_nothing(
    invites: Invites, api: Api, owner: Account, project: dict[str, Any], client: httpx.AsyncClient
) -> None:
    r = await client.post(
        f"/api/projects/{project['id']}/invitations",
        json={"email": owner.email, "role": "tester"},
        headers=owner.headers,
    )
    assert_problem(r, 409, "already_member")

    _, token = await invites.send(owner, project["id"], "carol@example.com")
    carol = await api.register("carol@example.com")
    await api.add_member(owner, project["id"], carol, "developer")  # meanwhile, directly
    assert_problem(await invites.accept(carol, token), 409, "already_member")
    [listed] = await invites.listed(owner, project["id"])
    assert listed["status"] == "pending", "the refused accept was rolled back whole"


async def test_only_an_owner_invites_an_owner(
    invites: Invites, api: Api, owner: Account, project: dict[str, Any], client: httpx.AsyncClient
) -> None:
    admin = await api.register("admin@example.com")
    await api.add_member(owner, project["id"], admin, "admin")

    r = await client.post(f"/api/projects/{project['id']}/invitations",
                          json={"email": "carol@example.com", "role": "owner"},
                          headers=admin.headers)  # fmt: skip
    assert_problem(r, 403, "insufficient_role")
    invitation, _ = await invites.send(owner, project["id"], "carol@example.com", "owner")
    assert invitation["role"] == "owner"
    await invites.send(admin, project["id"], "dave@example.com", "admin")


@pytest.mark.parametrize(
    "body",
    [
        {"email": "carol@example.com"},
        {"email": "carol@example.com", "role": "boss"},
        {"email": "not an e-mail", "role": "tester"},
        {"email": "carol@example.com", "role": "tester", "status": "accepted"},
    ],
)
async def test_what_invite_refuses(
    client: httpx.AsyncClient, owner: Account, project: dict[str, Any], body: dict[str, str]
) -> None:
    r = await client.post(
        f"/api/projects/{project['id']}/invitations", json=body, headers=owner.headers
    )
    assert_problem(r, 422, "validation_error")

"""Invitations as the invited person lives them (issue 36): a resend is the same invitation in
a new mail, every mail's link working; their pending invitations listed for them once their
address is verified, to accept or decline without the link; the caps and blocks of issue 34
still bound every mail."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from buildbay.clock import FrozenClock
from buildbay.config import Settings
from buildbay.context import AppContext
from tests.conftest import Account, Api, assert_problem
from tests.invitations.test_invitation_caps import verify_address
from tests.invitations.test_invitations import Invites, invites, project, settings
from tests.smtp import smtp

__all__ = ["invites", "project", "settings", "smtp"]
MINE = "/api/account/invitations"
DECLINE = "/api/invitations/decline"


async def test_resending_an_expired_invitation_keeps_it_its_groups_and_its_first_link(
    invites: Invites, api: Api, owner: Account, project: dict[str, Any],
    client: httpx.AsyncClient, clock: FrozenClock, app: FastAPI,
) -> None:  # fmt: skip
    groups = f"/api/projects/{project['id']}/groups"
    r = await client.post(groups, json={"name": "QA"}, headers=owner.headers)
    qa = r.json()["id"]
    r = await client.post(
        f"{groups}/{qa}/testers", json={"emails": ["carol@example.com"]}, headers=owner.headers
    )
    assert r.json()["invited"] == ["carol@example.com"], r.text
    ctx: AppContext = app.state.ctx
    assert ctx.jobs is not None
    await ctx.jobs.run_until_idle()
    [first] = await invites.listed(owner, project["id"])
    first_link = invites.smtp.messages()[-1].link("http").rsplit("/", 1)[1]
    clock.advance(days=8)
    owner = await api.login(owner)

    again, _ = await invites.send(owner, project["id"], "carol@example.com")

    assert again["id"] == first["id"]
    assert again["status"] == "pending"
    carol = await api.register("carol@example.com")
    r = await invites.accept(carol, first_link)  # the first mail's link, after the resend
    assert r.status_code == 200, r.text
    r = await client.get(f"{groups}/{qa}/testers", headers=owner.headers)
    assert [t["email"] for t in r.json()["testers"]] == ["carol@example.com"]


async def test_revoking_an_invitation_stops_the_links_of_all_its_mails(
    invites: Invites, api: Api, owner: Account, project: dict[str, Any], client: httpx.AsyncClient
) -> None:
    invitation, first = await invites.send(owner, project["id"], "carol@example.com")
    _, second = await invites.send(owner, project["id"], "carol@example.com")
    r = await client.delete(
        f"/api/projects/{project['id']}/invitations/{invitation['id']}", headers=owner.headers
    )
    assert r.status_code == 204

    carol = await api.register("carol@example.com")
    for token in (first, second):
        assert_problem(await invites.accept(carol, token), 422, "invitation_expired")


async def test_a_resend_past_the_recipients_cap_is_refused_and_the_first_link_still_works(
    invites: Invites, api: Api, owner: Account, project: dict[str, Any],
    client: httpx.AsyncClient, settings: Settings,
) -> None:  # fmt: skip
    settings.invitations_per_recipient_per_day = 2
    _, first = await invites.send(owner, project["id"], "carol@example.com")
    await invites.send(owner, project["id"], "carol@example.com")

    r = await client.post(
        f"/api/projects/{project['id']}/invitations",
        json={"email": "carol@example.com", "role": "tester"},
        headers=owner.headers,
    )

    assert_problem(r, 429, "invitation_limit")
    carol = await api.register("carol@example.com")
    assert (await invites.accept(carol, first)).status_code == 200


async def test_a_verified_person_lists_accepts_and_declines_their_invitations_by_id(
    invites: Invites, api: Api, owner: Account, app: FastAPI, client: httpx.AsyncClient,
) -> None:  # fmt: skip
    acme = await api.project(owner, "Acme Beta")
    zeta = await api.project(owner, "Zeta")
    await invites.send(owner, acme["id"], "carol@example.com", "tester")
    _, zeta_link = await invites.send(owner, zeta["id"], "carol@example.com", "developer")
    carol = await verify_address(app, await api.register("carol@example.com"))

    r = await client.get(MINE, headers=carol.headers)
    assert r.status_code == 200, r.text
    listed = r.json()["invitations"]
    assert [(i["projectName"], i["role"], i["invitedByName"]) for i in listed] == [
        ("Zeta", "developer", owner.user["name"]),
        ("Acme Beta", "tester", owner.user["name"]),
    ]
    by_project = {i["projectId"]: i["id"] for i in listed}

    r = await client.post(
        "/api/invitations/accept", json={"invitationId": by_project[acme["id"]]},
        headers=carol.headers,
    )  # fmt: skip
    assert r.status_code == 200, r.text
    assert r.json()["role"] == "tester"
    r = await client.post(DECLINE, json={"invitationId": by_project[zeta["id"]]},
                          headers=carol.headers)  # fmt: skip
    assert r.status_code == 204, r.text

    assert (await client.get(MINE, headers=carol.headers)).json()["invitations"] == []
    assert [i["status"] for i in await invites.listed(owner, zeta["id"])] == ["declined"]
    assert_problem(await invites.accept(carol, zeta_link), 422, "invitation_expired")
    r = await client.get(f"/api/projects/{zeta['id']}", headers=carol.headers)
    assert_problem(r, 403, "not_a_member")


async def test_someone_elses_invitation_is_neither_accepted_nor_declined_by_id(
    invites: Invites, api: Api, owner: Account, project: dict[str, Any], app: FastAPI,
    client: httpx.AsyncClient,
) -> None:  # fmt: skip
    invitation, _ = await invites.send(owner, project["id"], "carol@example.com")
    mallory = await verify_address(app, await api.register("mallory@example.com"))

    for url in ("/api/invitations/accept", DECLINE):
        r = await client.post(url, json={"invitationId": invitation["id"]},
                              headers=mallory.headers)  # fmt: skip
        assert_problem(r, 403, "invitation_email_mismatch")
    [listed] = await invites.listed(owner, project["id"])
    assert listed["status"] == "pending"


async def test_an_unverified_address_sees_no_invitation_and_takes_none_by_id(
    invites: Invites, api: Api, owner: Account, project: dict[str, Any],
    client: httpx.AsyncClient,
) -> None:  # fmt: skip
    """An account made with someone else's address (never verified) learns nothing of their
    invitations and cannot answer them: only the mailed link, or a verified address, can."""
    invitation, _ = await invites.send(owner, project["id"], "carol@example.com")
    squatter = await api.register("carol@example.com")

    r = await client.get(MINE, headers=squatter.headers)
    assert r.json() == {"invitations": []}
    for url in ("/api/invitations/accept", DECLINE):
        r = await client.post(url, json={"invitationId": invitation["id"]},
                              headers=squatter.headers)  # fmt: skip
        assert_problem(r, 403, "address_not_verified")
    [listed] = await invites.listed(owner, project["id"])
    assert listed["status"] == "pending"


async def test_declining_by_the_link_needs_the_invited_account(
    invites: Invites, api: Api, owner: Account, project: dict[str, Any],
    client: httpx.AsyncClient,
) -> None:  # fmt: skip
    _, token = await invites.send(owner, project["id"], "carol@example.com")
    mallory = await api.register("mallory@example.com")
    r = await client.post(DECLINE, json={"token": token}, headers=mallory.headers)
    assert_problem(r, 403, "invitation_email_mismatch")

    carol = await api.register("carol@example.com")
    r = await client.post(DECLINE, json={"token": token}, headers=carol.headers)
    assert r.status_code == 204, r.text
    assert_problem(await invites.accept(carol, token), 422, "invitation_expired")


@pytest.mark.parametrize(
    "body", [{}, {"token": "bbi_x", "invitationId": "inv_x"}, {"invitationId": ""}]
)
async def test_an_answer_names_one_invitation(
    api: Api, client: httpx.AsyncClient, body: dict[str, str]
) -> None:
    carol = await api.register("carol@example.com")
    for url in ("/api/invitations/accept", DECLINE):
        r = await client.post(url, json=body, headers=carol.headers)
        assert_problem(r, 422, "validation_error")

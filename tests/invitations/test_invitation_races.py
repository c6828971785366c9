"""Invitation requests sent at the same moment: the rules hold as they do one at a time (on
PostgreSQL, where in-process requests interleave; SQLite has one writer)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from tests.conftest import PG_URL, Account, Api, assert_problem
from tests.invitations.test_invitation_caps import verify_address
from tests.invitations.test_invitations import Invites, invites, project, settings
from tests.smtp import smtp

__all__ = ["invites", "project", "settings", "smtp"]
TRIALS = 6
pytestmark = [
    pytest.mark.skipif(not PG_URL, reason="the race needs PostgreSQL"),
    pytest.mark.postgres,
]


@pytest.fixture
async def owner(app: FastAPI, api: Api) -> Account:
    """Verified: its trials send more invitations than an unverified account may in a day."""
    return await verify_address(app, await api.register("owner@example.com"))


async def test_a_double_clicked_accept_joins_once(
    invites: Invites, api: Api, owner: Account, project: dict[str, Any]
) -> None:
    for n in range(TRIALS):
        email = f"carol{n}@example.com"
        _, token = await invites.send(owner, project["id"], email)
        carol = await api.register(email)

        answers = await asyncio.gather(invites.accept(carol, token), invites.accept(carol, token))

        assert sorted(r.status_code for r in answers) == [200, 422], [r.text for r in answers]
        assert_problem(next(r for r in answers if r.status_code == 422), 422, "invitation_expired")


async def test_an_accept_and_a_revoke_at_once_never_both_win(
    invites: Invites, api: Api, owner: Account, project: dict[str, Any],
    client: httpx.AsyncClient,
) -> None:  # fmt: skip
    for n in range(TRIALS):
        email = f"dave{n}@example.com"
        invitation, token = await invites.send(owner, project["id"], email)
        dave = await api.register(email)
        url = f"/api/projects/{project['id']}/invitations/{invitation['id']}"

        accepted, revoked = await asyncio.gather(
            invites.accept(dave, token), client.delete(url, headers=owner.headers)
        )

        outcome = (accepted.status_code, revoked.status_code)
        assert outcome in {(200, 409), (422, 204)}, (accepted.text, revoked.text)
        status = {i["id"]: i["status"] for i in await invites.listed(owner, project["id"])}
        assert status[invitation["id"]] == ("accepted" if outcome[0] == 200 else "revoked")
        r = await client.get(f"/api/projects/{project['id']}", headers=dave.headers)
        assert r.status_code == (200 if outcome[0] == 200 else 403)


async def test_inviting_one_email_several_times_at_once_keeps_one_invitation(
    api: Api, owner: Account, project: dict[str, Any], client: httpx.AsyncClient
) -> None:
    url = f"/api/projects/{project['id']}/invitations"
    for n in range(TRIALS):
        body = {"email": f"erin{n}@example.com", "role": "tester"}

        # Three: as many invitations as an address takes in a day (invitations/caps.py).
        answers = await asyncio.gather(
            *(client.post(url, json=body, headers=owner.headers) for _ in range(3))
        )

        assert [r.status_code for r in answers] == [201] * 3, [r.text for r in answers]
        assert len({r.json()["id"] for r in answers}) == 1
    r = await client.get(url, headers=owner.headers)
    assert len(r.json()["invitations"]) == TRIALS

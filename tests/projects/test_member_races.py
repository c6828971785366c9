"""Membership changes sent at the same moment: the rules hold as they do one at a time.

On PostgreSQL two requests interleave between the rule's read and its write; on SQLite the
in-process requests of these tests do not (one writer, no await between them), so the races
themselves run with the PostgreSQL suite, and SQLite's side is checked on the lock directly.
"""

from __future__ import annotations

import asyncio
import uuid

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import select

from buildbay.db.concurrency import lock_row
from buildbay.projects.models import Project
from tests.conftest import PG_URL, Account, Api, assert_problem
from tests.invitations.test_invitation_caps import verify_address
from tests.projects.test_members import members_path, roles_of

TRIALS = 8
race = pytest.mark.skipif(
    not PG_URL, reason="the race needs PostgreSQL (SQLite's in-process requests never interleave)"
)


async def _two_owners(api: Api, owner: Account, second: Account) -> dict:
    project = await api.project(owner, f"Acme {uuid.uuid4().hex[:8]}")  # one per trial
    await api.add_member(owner, project["id"], second, "owner")
    return project


@race
@pytest.mark.postgres
async def test_two_owners_leaving_at_once_leave_one_owner(
    api: Api, client: httpx.AsyncClient, owner: Account, app: FastAPI
) -> None:
    # Verified: added to a project a trial, more often than a day's invitation caps allow an
    # unverified account to be added.
    second = await verify_address(app, await api.register())
    for _ in range(TRIALS):
        project = await _two_owners(api, owner, second)

        answers = await asyncio.gather(
            client.delete(members_path(project, owner), headers=owner.headers),
            client.delete(members_path(project, second), headers=second.headers),
        )

        statuses = sorted(r.status_code for r in answers)
        assert statuses == [204, 409], [r.text for r in answers]
        refused = next(r for r in answers if r.status_code == 409)
        assert_problem(refused, 409, "last_owner")
        stayed = owner if answers[0].status_code == 409 else second
        assert await roles_of(client, project, stayed) == {stayed.email: "owner"}


@race
@pytest.mark.postgres
async def test_two_owners_demoting_themselves_at_once_leave_one_owner(
    api: Api, client: httpx.AsyncClient, owner: Account, app: FastAPI
) -> None:
    # Verified: added to a project a trial, more often than a day's invitation caps allow an
    # unverified account to be added.
    second = await verify_address(app, await api.register())
    for _ in range(TRIALS):
        project = await _two_owners(api, owner, second)

        answers = await asyncio.gather(
            *(
                client.put(members_path(project, who), json={"role": "admin"}, headers=who.headers)
                for who in (owner, second)
            )
        )

        statuses = sorted(r.status_code for r in answers)
        assert statuses == [200, 409], [r.text for r in answers]
        assert_problem(next(r for r in answers if r.status_code == 409), 409, "last_owner")
        roles = await roles_of(client, project, owner)
        assert sorted(roles.values()) == ["admin", "owner"]


@race
@pytest.mark.postgres
async def test_adding_the_same_member_six_times_at_once_adds_them_once(
    api: Api, client: httpx.AsyncClient, owner: Account, app: FastAPI
) -> None:
    newcomer = await verify_address(app, await api.register())  # (as `second` above)
    for trial in range(TRIALS):
        project = await api.project(owner, f"Acme {trial}")

        answers = await asyncio.gather(
            *(
                client.post(
                    members_path(project),
                    json={"email": newcomer.email, "role": "developer"},
                    headers=owner.headers,
                )
                for _ in range(6)
            )
        )

        statuses = sorted(r.status_code for r in answers)
        assert statuses == [201] + [409] * 5, [r.text for r in answers]
        for refused in answers:
            if refused.status_code == 409:
                assert_problem(refused, 409, "already_member")
        roles = await roles_of(client, project, owner)
        assert roles == {owner.email: "owner", newcomer.email: "developer"}


async def test_a_locked_project_row_makes_a_second_locker_wait_for_the_commit(
    api: Api, owner: Account, app: object
) -> None:
    """What the member rules rely on, on either database: while one transaction holds the
    project's lock, another's `lock_row` waits, and then reads what the first committed."""
    project = await api.project(owner)
    sessions = app.state.ctx.sessions  # type: ignore[attr-defined]
    async with sessions() as first, sessions() as second:
        assert await lock_row(first, Project.id, project["id"])
        second_locks = asyncio.ensure_future(lock_row(second, Project.id, project["id"]))
        await asyncio.sleep(0.2)  # a chance to get past the lock, which it must not take
        assert not second_locks.done()
        (await first.get_one(Project, project["id"])).name = "Renamed"
        await first.commit()
        assert await asyncio.wait_for(second_locks, timeout=10)
        name = await second.scalar(select(Project.name).where(Project.id == project["id"]))
        assert name == "Renamed"
        await second.rollback()


async def test_locking_a_row_that_does_not_exist_says_so(app: object) -> None:
    sessions = app.state.ctx.sessions  # type: ignore[attr-defined]
    async with sessions() as db:
        assert not await lock_row(db, Project.id, "prj_none")
        await db.rollback()


@race
@pytest.mark.postgres
async def test_one_of_two_creations_of_one_name_at_once_is_409(
    api: Api, client: httpx.AsyncClient, owner: Account
) -> None:
    for trial in range(TRIALS):
        name = f"Race {trial}"
        answers = await asyncio.gather(
            *(client.post("/api/projects", json={"name": name}, headers=owner.headers)
              for _ in range(2))
        )  # fmt: skip
        assert sorted(r.status_code for r in answers) == [201, 409], [r.text for r in answers]
        project = next(r.json() for r in answers if r.status_code == 201)
        apps = f"/api/projects/{project['id']}/applications"
        answers = await asyncio.gather(
            *(client.post(apps, json={"name": "App"}, headers=owner.headers) for _ in range(2))
        )
        assert sorted(r.status_code for r in answers) == [201, 409], [r.text for r in answers]

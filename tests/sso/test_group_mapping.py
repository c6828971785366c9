"""A project's mapping of the provider's groups to roles, applied at each sign-in: members
added, their role changed, removed; only the memberships the mapping made; audited."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from fastapi import FastAPI
from sqlalchemy import update

from buildbay.audit.record import NO_ORIGIN
from buildbay.auth.models import User
from buildbay.projects.service import ProjectService
from buildbay.sso.groups import apply_group_mappings
from buildbay.sso.models import SsoMembership
from tests.conftest import Account, Api, assert_problem
from tests.oidc_provider import OidcProvider
from tests.pools import when_written
from tests.sso.conftest import audit_entries, open_browser

pytestmark = pytest.mark.slow
GUARD = 30  # seconds: only so that a broken test fails instead of hanging, never for timing


async def _members(api: Api, owner: Account, project_id: str) -> dict[str, str]:
    r = await api.client.get(f"/api/projects/{project_id}/members", headers=owner.headers)
    assert r.status_code == 200, r.text
    return {m["email"]: m["role"] for m in r.json()["members"]}


async def _sign_in(app: FastAPI, provider: OidcProvider, sub: str, **claims: Any) -> None:
    provider.set_user(sub, email_verified=True, **claims)
    async with open_browser(app, provider) as browser:
        done = await browser.sign_in(sub)
        assert not done.headers["location"].startswith("/login"), await browser.notice()


async def test_the_mapping_adds_changes_and_removes_what_it_made_and_nothing_else(
    app: FastAPI, api: Api, owner: Account, provider: OidcProvider
) -> None:
    project = await api.project(owner, "Rocket")
    url = f"/api/projects/{project['id']}/sso-groups"
    mapping = {
        "mappings": [{"group": "mobile", "role": "developer"}, {"group": "qa", "role": "tester"}]
    }
    r = await api.client.put(url, json=mapping, headers=owner.headers)
    assert r.status_code == 200, r.text
    assert r.json() == {
        "mappings": [{"group": "mobile", "role": "developer"}, {"group": "qa", "role": "tester"}],
        "groupsClaim": "groups",
    }
    assert (await api.client.get(url, headers=owner.headers)).json() == r.json()

    await _sign_in(app, provider, "nia-1", email="nia@example.com", groups=["qa", "sales"])
    assert (await _members(api, owner, project["id"]))["nia@example.com"] == "tester"
    await _sign_in(app, provider, "nia-1", email="nia@example.com", groups=["qa", "mobile"])
    assert (await _members(api, owner, project["id"]))["nia@example.com"] == "developer"
    # A token without the claim changes nothing; an empty list removes what the mapping gave.
    await _sign_in(app, provider, "nia-1", email="nia@example.com")
    assert (await _members(api, owner, project["id"]))["nia@example.com"] == "developer"
    await _sign_in(app, provider, "nia-1", email="nia@example.com", groups=[])
    assert "nia@example.com" not in await _members(api, owner, project["id"])

    # Someone added by hand stays, whatever their groups say.
    await _sign_in(app, provider, "oli-1", email="oli@example.com", groups=[])
    r = await api.client.post(
        f"/api/projects/{project['id']}/members",
        json={"email": "oli@example.com", "role": "admin"},
        headers=owner.headers,
    )
    assert r.status_code == 201, r.text
    await _sign_in(app, provider, "oli-1", email="oli@example.com", groups=["qa"])
    await _sign_in(app, provider, "oli-1", email="oli@example.com", groups=[])
    assert (await _members(api, owner, project["id"]))["oli@example.com"] == "admin"

    nia = [
        (e.action, e.details.get("role") or e.details.get("to"), e.project_id)
        for e in [
            *await audit_entries(app, "member.added"),
            *await audit_entries(app, "member.role_changed"),
            *await audit_entries(app, "member.removed"),
        ]
        if e.target_name == "nia@example.com"
    ]
    assert sorted(nia) == sorted(
        [
            ("member.added", "tester", project["id"]),
            ("member.role_changed", "developer", project["id"]),
            ("member.removed", "developer", project["id"]),
        ]
    )
    [changed] = await audit_entries(app, "sso_groups.changed")
    assert changed.actor_id == owner.user["id"]
    assert changed.details == {"before": [], "after": mapping["mappings"]}


async def test_the_same_mapping_put_again_reads_the_same_and_is_not_a_change(
    app: FastAPI, api: Api, owner: Account
) -> None:
    # Mixed case: a database collation (PostgreSQL's en_US, ICU's) orders `mobile` before `QA`,
    # Python the other way; the order is Python's wherever the mapping is read.
    project = await api.project(owner)
    url = f"/api/projects/{project['id']}/sso-groups"
    mapping = {
        "mappings": [{"group": "mobile", "role": "developer"}, {"group": "QA", "role": "tester"}]
    }

    first = await api.client.put(url, json=mapping, headers=owner.headers)
    again = await api.client.put(url, json=mapping, headers=owner.headers)

    assert first.status_code == again.status_code == 200
    expected = [{"group": "QA", "role": "tester"}, {"group": "mobile", "role": "developer"}]
    assert first.json()["mappings"] == again.json()["mappings"] == expected
    assert (await api.client.get(url, headers=owner.headers)).json() == first.json()
    assert len(await audit_entries(app, "sso_groups.changed")) == 1


async def test_a_mapping_is_checked_and_owner_is_never_mapped(api: Api, owner: Account) -> None:
    project = await api.project(owner)
    url = f"/api/projects/{project['id']}/sso-groups"
    for body in (
        {"mappings": [{"group": "bosses", "role": "owner"}]},
        {"mappings": [{"group": "qa", "role": "tester"}, {"group": "qa", "role": "admin"}]},
        {"mappings": [{"group": "", "role": "tester"}]},
        {"mappings": [{"group": "qa", "role": "tester", "extra": 1}]},
        {"mappings": [{"group": f"g{i}", "role": "tester"} for i in range(101)]},
    ):
        assert_problem(await api.client.put(url, json=body, headers=owner.headers), 422)
    r = await api.client.put(url, json={"mappings": []}, headers=owner.headers)
    assert r.status_code == 200
    assert r.json()["mappings"] == []


async def test_the_console_page_saves_the_mapping_from_lines(
    app: FastAPI, api: Api, owner: Account, provider: OidcProvider
) -> None:
    project = await api.project(owner, "Rocket")
    provider.set_user("owner-1", email=owner.email, email_verified=True)
    async with app.state.ctx.sessions() as db:  # the owner proves the address (to be linked)
        proven = update(User).where(User.email == owner.email)
        await db.execute(proven.values(email_verified_at=User.created_at))
        await db.commit()
    async with open_browser(app, provider) as browser:
        await browser.sign_in("owner-1")
        page = await browser.page(f"/projects/{project['id']}")
        assert "Groups from Acme ID" in page.text
        form = await browser.page(f"/projects/{project['id']}/sso-groups")
        assert form.status_code == 200
        csrf = form.text.split('name="csrf" value="', 1)[1].split('"', 1)[0]
        path = f"/projects/{project['id']}/sso-groups"
        bad = await browser.client.post(path, data={"csrf": csrf, "mappings": "qa, owner"})
        assert bad.status_code == 422
        assert "the role is tester, developer or admin" in bad.text
        # The API's rule for a group's name (no bidirectional or C1 control), not a looser one.
        for name in ("qa\u202eevil", "qa\x85", "=?utf-8?q?qa?="):
            bad = await browser.client.post(
                path, data={"csrf": csrf, "mappings": f"{name}, tester"}
            )
            assert bad.status_code == 422, name
        saved = await browser.client.post(
            path, data={"csrf": csrf, "mappings": "mobile team, developer\n\nqa,TESTER\n"}
        )
        assert saved.status_code == 303
        shown = await browser.page(path)
        assert "Group mapping saved (2 groups)" in shown.text
    r = await api.client.get(f"/api/projects/{project['id']}/sso-groups", headers=owner.headers)
    assert r.json()["mappings"] == [
        {"group": "mobile team", "role": "developer"},
        {"group": "qa", "role": "tester"},
    ]


async def test_a_sign_in_waits_for_a_role_change_by_hand_and_never_undoes_it(
    app: FastAPI, api: Api, owner: Account, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every change of a membership takes the project's row first (projects/service.py
    # `_lock_members`), so that the last-owner rule counts what the one before committed. A
    # sign-in's mapping must too: here an owner makes a mapped developer an owner while that
    # person signs in without the group; the sign-in must see the new owner and leave them be,
    # not remove them from the project on a role it read before the promotion committed.
    project = await api.project(owner, "Rocket")
    nia = await api.register("nia@example.com")
    r = await api.client.post(
        f"/api/projects/{project['id']}/members",
        json={"email": nia.email, "role": "developer"},
        headers=owner.headers,
    )
    assert r.status_code == 201, r.text
    ctx = app.state.ctx
    async with ctx.sessions() as db, db.begin():  # the mapping made the membership
        now = ctx.clock.now()
        db.add(SsoMembership(project_id=project["id"], user_id=nia.user["id"], created_at=now))

    reached, released = asyncio.Event(), asyncio.Event()
    change_role = ProjectService.change_role

    async def held(service: ProjectService, *args: Any) -> Any:
        changed = await change_role(service, *args)
        reached.set()  # the promotion's statements ran; its commit waits
        await released.wait()
        return changed

    monkeypatch.setattr(ProjectService, "change_role", held)
    promotion = asyncio.create_task(
        api.client.put(
            f"/api/projects/{project['id']}/members/{nia.user['id']}",
            json={"role": "owner"},
            headers=owner.headers,
        )
    )
    await asyncio.wait_for(reached.wait(), GUARD)

    async def sign_in_without_groups() -> None:
        async with ctx.sessions() as db, db.begin():
            user = await db.get_one(User, nia.user["id"])
            await apply_group_mappings(db, ctx.clock.now(), user, set(), NO_ORIGIN)

    # Its first write (or the project's lock), which waits for the promotion's commit on
    # SQLite; on PostgreSQL only a lock the promotion holds makes it wait.
    waiting = when_written(app, "INSERT", "UPDATE", "DELETE", "SELECT PROJECTS.ID")
    sign_in = asyncio.create_task(sign_in_without_groups())
    await asyncio.wait_for(waiting.wait(), GUARD)
    released.set()
    assert (await asyncio.wait_for(promotion, GUARD)).status_code == 200
    await asyncio.wait_for(sign_in, GUARD)

    assert (await _members(api, owner, project["id"]))[nia.email] == "owner"

"""Tester groups over HTTP: the built-in `everyone`, groups made by developers, testers added
by e-mail (members join, others are invited and join when they accept)."""

from __future__ import annotations

from buildbay.distribution.models import EVERYONE
from tests.conftest import assert_problem
from tests.distribution.conftest import Team


async def test_every_project_has_everyone_holding_all_its_members(team: Team) -> None:
    await team.member("tess@example.com")

    r = await team.client.get(team.groups, headers=team.owner.headers)

    assert r.status_code == 200, r.text
    [everyone] = r.json()["groups"]
    assert everyone["id"] == EVERYONE
    assert everyone["name"] == EVERYONE
    assert everyone["testersCount"] == 2
    assert r.json()["nextCursor"] is None
    r = await team.client.get(f"{team.groups}/everyone/testers", headers=team.owner.headers)
    assert [t["email"] for t in r.json()["testers"]] == ["owner@example.com", "tess@example.com"]


async def test_everyone_cannot_be_renamed_deleted_or_left(team: Team) -> None:
    tess = await team.member("tess@example.com")
    headers = team.owner.headers

    r = await team.client.put(f"{team.groups}/everyone", json={"name": "all"}, headers=headers)
    assert_problem(r, 409, "builtin_group")
    r = await team.client.delete(f"{team.groups}/everyone", headers=headers)
    assert_problem(r, 409, "builtin_group")
    r = await team.client.delete(
        f"{team.groups}/everyone/testers/{tess.user['id']}", headers=headers
    )
    assert_problem(r, 409, "builtin_group")
    r = await team.client.post(team.groups, json={"name": "Everyone"}, headers=headers)
    assert_problem(r, 409, "group_exists")


async def test_a_developer_makes_a_group_adds_members_renames_and_deletes_it(team: Team) -> None:
    dev = await team.member("dev@example.com", "developer")
    tess = await team.member("tess@example.com")
    headers = dev.headers

    r = await team.client.post(team.groups, json={"name": " QA "}, headers=headers)
    assert r.status_code == 201, r.text
    group = r.json()
    assert set(group) == {"id", "name", "testersCount", "createdAt"}
    assert group["name"] == "QA"
    assert group["testersCount"] == 0
    testers = f"{team.groups}/{group['id']}/testers"

    r = await team.client.post(testers, json={"emails": ["TESS@example.com"]}, headers=headers)
    assert r.status_code == 200, r.text
    assert [t["userId"] for t in r.json()["testers"]] == [tess.user["id"]]
    assert r.json()["invited"] == []
    # Adding again changes nothing.
    r = await team.client.post(testers, json={"emails": [tess.email]}, headers=headers)
    assert r.status_code == 200, r.text
    r = await team.client.get(team.groups, headers=tess.headers)
    assert [(g["name"], g["testersCount"]) for g in r.json()["groups"]] == [
        ("everyone", 3),
        ("QA", 1),
    ]

    r = await team.client.post(team.groups, json={"name": "QA"}, headers=headers)
    assert_problem(r, 409, "group_exists")
    r = await team.client.put(
        f"{team.groups}/{group['id']}", json={"name": "Beta"}, headers=headers
    )
    assert r.status_code == 200, r.text
    assert r.json()["name"] == "Beta"
    assert r.json()["testersCount"] == 1

    r = await team.client.delete(f"{testers}/{tess.user['id']}", headers=headers)
    assert r.status_code == 204, r.text
    r = await team.client.delete(f"{testers}/{tess.user['id']}", headers=headers)
    assert_problem(r, 404, "tester_not_found")
    r = await team.client.get(testers, headers=headers)
    assert r.json()["testers"] == []

    r = await team.client.delete(f"{team.groups}/{group['id']}", headers=headers)
    assert r.status_code == 204, r.text
    r = await team.client.get(testers, headers=headers)
    assert_problem(r, 404, "group_not_found")


async def test_a_tester_reads_groups_but_cannot_change_them(team: Team) -> None:
    tess = await team.member("tess@example.com")
    group_id = await team.group("QA", tess.email)

    r = await team.client.get(f"{team.groups}/{group_id}/testers", headers=tess.headers)
    assert r.status_code == 200, r.text
    r = await team.client.post(team.groups, json={"name": "Mine"}, headers=tess.headers)
    assert_problem(r, 403, "insufficient_role")
    r = await team.client.delete(f"{team.groups}/{group_id}", headers=tess.headers)
    assert_problem(r, 403, "insufficient_role")


async def test_an_email_that_is_no_member_is_invited_and_joins_the_group_on_accepting(
    team: Team,
) -> None:
    group_id = await team.group("QA")
    testers = f"{team.groups}/{group_id}/testers"

    r = await team.client.post(
        testers, json={"emails": ["new@example.com"]}, headers=team.owner.headers
    )
    assert r.status_code == 200, r.text
    assert r.json() == {"testers": [], "invited": ["new@example.com"], "notInvited": []}
    await team.run_jobs()
    [mail] = team.mails_to("new@example.com")
    token = mail.link("http").rsplit("/", 1)[1]
    r = await team.client.get(f"/api/projects/{team.project['id']}/invitations",
                              headers=team.owner.headers)  # fmt: skip
    [invitation] = r.json()["invitations"]
    assert invitation["role"] == "tester"

    newcomer = await team.api.register("new@example.com")
    r = await team.client.post(
        "/api/invitations/accept", json={"token": token}, headers=newcomer.headers
    )
    assert r.status_code == 200, r.text

    r = await team.client.get(testers, headers=team.owner.headers)
    assert [t["email"] for t in r.json()["testers"]] == ["new@example.com"]


async def test_adding_an_email_with_a_pending_invitation_keeps_its_role_and_sends_no_mail(
    team: Team,
) -> None:
    r = await team.client.post(
        f"/api/projects/{team.project['id']}/invitations",
        json={"email": "boss@example.com", "role": "admin"},
        headers=team.owner.headers,
    )
    assert r.status_code == 201, r.text
    await team.run_jobs()
    group_id = await team.group("QA", "boss@example.com")
    await team.run_jobs()

    assert len(team.mails_to("boss@example.com")) == 1
    r = await team.client.get(f"/api/projects/{team.project['id']}/invitations",
                              headers=team.owner.headers)  # fmt: skip
    [invitation] = r.json()["invitations"]
    assert invitation["role"] == "admin"
    assert group_id


async def test_groups_page_with_a_cursor(team: Team) -> None:
    for name in ("a", "b", "c"):
        await team.group(name)

    r = await team.client.get(f"{team.groups}?limit=2", headers=team.owner.headers)
    first = r.json()
    assert [g["name"] for g in first["groups"]] == ["everyone", "a"]
    r = await team.client.get(
        f"{team.groups}?limit=2&cursor={first['nextCursor']}", headers=team.owner.headers
    )
    assert [g["name"] for g in r.json()["groups"]] == ["b", "c"]
    assert r.json()["nextCursor"] is None


async def test_an_unknown_group_in_auto_distribute_groups_is_422(team: Team) -> None:
    group_id = await team.group("QA")
    path = f"/api/projects/{team.project['id']}/applications/{team.application['id']}"

    r = await team.client.put(
        path, json={"autoDistributeGroups": ["grp_nope"]}, headers=team.owner.headers
    )
    assert_problem(r, 422, "group_not_found")
    r = await team.client.put(
        path,
        json={"autoDistributeGroups": [group_id], "installLinkDays": 3},
        headers=team.owner.headers,
    )
    assert r.status_code == 200, r.text
    assert r.json()["autoDistributeGroups"] == [group_id]
    assert r.json()["installLinkDays"] == 3
    # Deleting the group takes it out of the application's list.
    r = await team.client.delete(f"{team.groups}/{group_id}", headers=team.owner.headers)
    r = await team.client.get(path, headers=team.owner.headers)
    assert r.json()["autoDistributeGroups"] == []


async def test_a_member_who_leaves_the_project_leaves_its_groups(team: Team) -> None:
    tess = await team.member("tess@example.com")
    group_id = await team.group("QA", tess.email)
    r = await team.client.delete(
        f"/api/projects/{team.project['id']}/members/{tess.user['id']}", headers=team.owner.headers
    )
    assert r.status_code == 204, r.text

    await team.api.add_member(team.owner, team.project["id"], tess, "tester")

    r = await team.client.get(f"{team.groups}/{group_id}/testers", headers=team.owner.headers)
    assert r.json()["testers"] == []

from __future__ import annotations

import re
from typing import Any

import httpx

from tests.conftest import Account, Api, assert_problem

TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


def members_path(project: dict[str, Any], user: Account | None = None) -> str:
    path = f"/api/projects/{project['id']}/members"
    return f"{path}/{user.user['id']}" if user is not None else path


async def roles_of(client: httpx.AsyncClient, project: dict[str, Any], caller: Account) -> dict:
    r = await client.get(members_path(project), headers=caller.headers)
    assert r.status_code == 200, r.text
    return {m["email"]: m["role"] for m in r.json()["members"]}


async def test_the_creator_is_the_projects_only_owner(
    api: Api, client: httpx.AsyncClient, owner: Account
) -> None:
    project = await api.project(owner)

    r = await client.get(members_path(project), headers=owner.headers)

    assert r.status_code == 200, r.text
    [member] = r.json()["members"]
    assert TIMESTAMP.match(member.pop("createdAt"))
    assert member == {
        "userId": owner.user["id"],
        "email": "owner@example.com",
        "name": owner.user["name"],
        "role": "owner",
        "emailVerified": False,
    }


async def test_admin_adds_a_member_by_e_mail(
    api: Api, client: httpx.AsyncClient, owner: Account
) -> None:
    admin, newcomer = await api.register(), await api.register("new.person@example.com")
    project = await api.project(owner)
    await api.add_member(owner, project["id"], admin, "admin")

    r = await client.post(
        members_path(project),
        json={"email": "New.Person@Example.COM", "role": "developer"},
        headers=admin.headers,
    )

    assert r.status_code == 201, r.text
    body = r.json()
    assert TIMESTAMP.match(body.pop("createdAt"))
    assert body == {
        "userId": newcomer.user["id"],
        "email": "new.person@example.com",
        "name": newcomer.user["name"],
        "role": "developer",
        "emailVerified": False,
    }
    assert await roles_of(client, project, owner) == {
        owner.email: "owner",
        admin.email: "admin",
        newcomer.email: "developer",
    }
    r = await client.get(f"/api/projects/{project['id']}", headers=newcomer.headers)
    assert r.status_code == 200, r.text


async def test_adding_an_unregistered_e_mail_is_422_user_not_found(
    api: Api, client: httpx.AsyncClient, owner: Account
) -> None:
    project = await api.project(owner)

    r = await client.post(
        members_path(project),
        json={"email": "nobody@example.com", "role": "tester"},
        headers=owner.headers,
    )

    problem = assert_problem(r, 422, "user_not_found")
    assert [e["field"] for e in problem["errors"]] == ["email"]


async def test_adding_someone_who_is_already_a_member_is_409(
    api: Api, client: httpx.AsyncClient, owner: Account
) -> None:
    tester = await api.register()
    project = await api.project(owner)
    await api.add_member(owner, project["id"], tester, "tester")

    r = await client.post(
        members_path(project), json={"email": tester.email, "role": "admin"}, headers=owner.headers
    )

    assert_problem(r, 409, "already_member")
    assert (await roles_of(client, project, owner))[tester.email] == "tester"


async def test_adding_a_member_needs_a_known_role_and_a_valid_e_mail(
    api: Api, client: httpx.AsyncClient, owner: Account
) -> None:
    project = await api.project(owner)
    cases: list[tuple[dict[str, object], str]] = [
        ({"email": owner.email, "role": "superuser"}, "role"),
        ({"email": "not-an-e-mail", "role": "tester"}, "email"),
        ({"email": owner.email}, "role"),
    ]
    for body, field in cases:
        r = await client.post(members_path(project), json=body, headers=owner.headers)

        problem = assert_problem(r, 422, "validation_error")
        assert [e["field"] for e in problem["errors"]] == [field], body


async def test_tester_cannot_add_members(
    api: Api, client: httpx.AsyncClient, owner: Account
) -> None:
    tester, outsider = await api.register(), await api.register()
    project = await api.project(owner)
    await api.add_member(owner, project["id"], tester, "tester")

    r = await client.post(
        members_path(project),
        json={"email": outsider.email, "role": "tester"},
        headers=tester.headers,
    )

    assert_problem(r, 403, "insufficient_role")
    assert outsider.email not in await roles_of(client, project, owner)


async def test_admin_changes_a_members_role(
    api: Api, client: httpx.AsyncClient, owner: Account
) -> None:
    admin, tester = await api.register(), await api.register()
    project = await api.project(owner)
    await api.add_member(owner, project["id"], admin, "admin")
    added = await api.add_member(owner, project["id"], tester, "tester")

    r = await client.put(
        members_path(project, tester), json={"role": "developer"}, headers=admin.headers
    )

    assert r.status_code == 200, r.text
    assert r.json() == added | {"role": "developer"}
    assert (await roles_of(client, project, owner))[tester.email] == "developer"


async def test_changing_an_unknown_member_is_404(
    api: Api, client: httpx.AsyncClient, owner: Account
) -> None:
    outsider = await api.register()
    project = await api.project(owner)

    r = await client.put(
        members_path(project, outsider), json={"role": "admin"}, headers=owner.headers
    )
    assert_problem(r, 404, "member_not_found")
    r = await client.delete(members_path(project, outsider), headers=owner.headers)
    assert_problem(r, 404, "member_not_found")


async def test_admin_removes_a_member_who_then_loses_access(
    api: Api, client: httpx.AsyncClient, owner: Account
) -> None:
    admin, developer = await api.register(), await api.register()
    project = await api.project(owner)
    await api.add_member(owner, project["id"], admin, "admin")
    await api.add_member(owner, project["id"], developer, "developer")

    r = await client.delete(members_path(project, developer), headers=admin.headers)

    assert r.status_code == 204, r.text
    assert r.content == b""
    assert developer.email not in await roles_of(client, project, owner)
    r = await client.get(f"/api/projects/{project['id']}", headers=developer.headers)
    assert_problem(r, 403, "not_a_member")
    r = await client.get("/api/projects", headers=developer.headers)
    assert r.json()["projects"] == []


async def test_a_member_can_leave_the_project(
    api: Api, client: httpx.AsyncClient, owner: Account
) -> None:
    tester = await api.register()
    project = await api.project(owner)
    await api.add_member(owner, project["id"], tester, "tester")

    r = await client.delete(members_path(project, tester), headers=tester.headers)

    assert r.status_code == 204, r.text
    assert await roles_of(client, project, owner) == {owner.email: "owner"}
    r = await client.get(f"/api/projects/{project['id']}", headers=tester.headers)
    assert_problem(r, 403, "not_a_member")


async def test_only_an_owner_grants_or_removes_the_owner_role(
    api: Api, client: httpx.AsyncClient, owner: Account
) -> None:
    admin, tester, co_owner = await api.register(), await api.register(), await api.register()
    project = await api.project(owner)
    await api.add_member(owner, project["id"], admin, "admin")
    await api.add_member(owner, project["id"], tester, "tester")
    await api.add_member(owner, project["id"], co_owner, "owner")
    before = await roles_of(client, project, owner)

    # An admin can neither add an owner, promote to owner, demote an owner nor remove one.
    outsider = await api.register()
    r = await client.post(
        members_path(project),
        json={"email": outsider.email, "role": "owner"},
        headers=admin.headers,
    )
    assert_problem(r, 403, "insufficient_role")
    r = await client.put(
        members_path(project, tester), json={"role": "owner"}, headers=admin.headers
    )
    assert_problem(r, 403, "insufficient_role")
    r = await client.put(
        members_path(project, admin), json={"role": "owner"}, headers=admin.headers
    )
    assert_problem(r, 403, "insufficient_role")
    r = await client.put(
        members_path(project, co_owner), json={"role": "tester"}, headers=admin.headers
    )
    assert_problem(r, 403, "insufficient_role")
    r = await client.delete(members_path(project, co_owner), headers=admin.headers)
    assert_problem(r, 403, "insufficient_role")
    assert await roles_of(client, project, owner) == before

    # An owner can do all of it.
    r = await client.put(
        members_path(project, tester), json={"role": "owner"}, headers=owner.headers
    )
    assert r.status_code == 200, r.text
    assert r.json()["role"] == "owner"
    r = await client.put(
        members_path(project, co_owner), json={"role": "admin"}, headers=owner.headers
    )
    assert r.status_code == 200, r.text
    assert r.json()["role"] == "admin"
    r = await client.delete(members_path(project, tester), headers=owner.headers)
    assert r.status_code == 204, r.text
    assert await roles_of(client, project, owner) == {
        owner.email: "owner",
        admin.email: "admin",
        co_owner.email: "admin",
    }


async def test_last_owner_cannot_leave_the_project(
    api: Api, client: httpx.AsyncClient, owner: Account
) -> None:
    project = await api.project(owner)

    r = await client.delete(members_path(project, owner), headers=owner.headers)

    assert_problem(r, 409, "last_owner")
    assert await roles_of(client, project, owner) == {owner.email: "owner"}

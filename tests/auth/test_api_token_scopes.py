"""API tokens cannot manage the account, and may be limited to a scope and to some projects.

The authorization matrix (tests/test_authorization_matrix.py) calls every route with a read
token, a builds:write token and a token restricted to another project; these tests check the
rest: what the tokens show, what creating one refuses, and the cases the matrix does not meet.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import func, select

from buildbay.auth.schemas import MAX_TOKEN_PROJECTS
from buildbay.jobs.models import Job
from tests.auth.conftest import bearer
from tests.conftest import Account, Api, assert_problem

TOKENS = "/api/account/api-tokens"


async def create_token(client: httpx.AsyncClient, account: Account, **body: Any) -> dict[str, Any]:
    r = await client.post(TOKENS, json={"name": "CI", **body}, headers=account.headers)
    assert r.status_code == 201, r.text
    created: dict[str, Any] = r.json()
    return created


def as_token(account: Account, secret: str) -> Account:
    """The account as a caller holding one of its API tokens (for the Api helpers)."""
    return Account(account.email, account.password, secret, "", account.user)


def builds_of(project: dict[str, Any], app: dict[str, Any]) -> str:
    return f"/api/app-distribution/{project['id']}/{app['id']}/builds"


# -- the account is a login's, never a token's ---------------------------------------------------


async def test_an_api_token_cannot_list_create_or_delete_api_tokens(
    client: httpx.AsyncClient, owner: Account
) -> None:
    ci = await create_token(client, owner)
    other = await create_token(client, owner, name="other")
    token = bearer(ci["token"])

    for method, url, body in (
        ("GET", TOKENS, None),
        ("POST", TOKENS, {"name": "permanent"}),
        ("DELETE", f"{TOKENS}/{other['id']}", None),
        ("DELETE", f"{TOKENS}/{ci['id']}", None),
    ):
        r = await client.request(method, url, json=body, headers=token)
        problem = assert_problem(r, 403, "interactive_session_required")
        assert "log in" in problem["detail"]

    r = await client.get(TOKENS, headers=owner.headers)
    assert [t["name"] for t in r.json()["apiTokens"]] == ["other", "CI"]


async def test_an_api_token_cannot_change_the_password(
    client: httpx.AsyncClient, owner: Account
) -> None:
    token = bearer((await create_token(client, owner))["token"])

    r = await client.post(
        "/api/auth/change-password",
        json={"currentPassword": owner.password, "newPassword": "a new password"},
        headers=token,
    )

    assert_problem(r, 403, "interactive_session_required")
    r = await client.post(
        "/api/auth/login", json={"email": owner.email, "password": owner.password}
    )
    assert r.status_code == 200, r.text


async def test_a_login_still_manages_api_tokens(client: httpx.AsyncClient, owner: Account) -> None:
    ci = await create_token(client, owner)

    r = await client.delete(f"{TOKENS}/{ci['id']}", headers=owner.headers)

    assert r.status_code == 204, r.text


# -- creating a limited token --------------------------------------------------------------------


async def test_a_token_without_limits_shows_null_scope_and_projects(
    client: httpx.AsyncClient, owner: Account
) -> None:
    created = await create_token(client, owner)

    assert created["scope"] is None
    assert created["projectIds"] is None


async def test_a_tokens_scope_and_projects_are_shown_when_created_and_listed(
    client: httpx.AsyncClient, api: Api, owner: Account
) -> None:
    first, second = await api.project(owner, "First"), await api.project(owner, "Second")

    created = await create_token(
        client,
        owner,
        scope="builds:write",
        projectIds=[second["id"], first["id"], second["id"]],
    )

    assert created["scope"] == "builds:write"
    assert created["projectIds"] == [second["id"], first["id"]]  # once each, as given
    r = await client.get(TOKENS, headers=owner.headers)
    [listed] = r.json()["apiTokens"]
    assert listed["scope"] == "builds:write"
    assert listed["projectIds"] == [second["id"], first["id"]]
    assert "token" not in listed


@pytest.mark.parametrize(
    "body",
    [
        {"scope": "write"},
        {"scope": "READ"},
        {"scope": ""},
        {"projectIds": []},
        {"projectIds": "prj_1"},
        {"projectIds": [1]},
        {"projectIds": [f"prj_{n}" for n in range(MAX_TOKEN_PROJECTS + 1)]},
    ],
)
async def test_a_bad_scope_or_project_list_is_422(
    client: httpx.AsyncClient, owner: Account, body: dict[str, Any]
) -> None:
    r = await client.post(TOKENS, json={"name": "CI", **body}, headers=owner.headers)

    assert_problem(r, 422)


async def test_projects_the_user_is_not_a_member_of_are_422(
    client: httpx.AsyncClient, api: Api, owner: Account
) -> None:
    mine = await api.project(owner, "Mine")
    stranger = await api.register("stranger@example.com")
    theirs = await api.project(stranger, "Theirs")

    for ids in ([theirs["id"]], [mine["id"], theirs["id"]], ["prj_00000000000000000000000000"]):
        r = await client.post(TOKENS, json={"name": "CI", "projectIds": ids}, headers=owner.headers)
        problem = assert_problem(r, 422, "not_your_project")
        assert problem["errors"][0]["field"] == "projectIds"
        assert mine["id"] not in problem["detail"]

    r = await client.get(TOKENS, headers=owner.headers)
    assert r.json()["apiTokens"] == []


# -- what a limited token may do -----------------------------------------------------------------


async def test_a_read_token_reads_and_downloads_but_changes_nothing(
    client: httpx.AsyncClient, api: Api, owner: Account
) -> None:
    project = await api.project(owner)
    app = await api.application(owner, project["id"])
    build = await api.upload(owner, project["id"], app["id"])
    token = bearer((await create_token(client, owner, scope="read"))["token"])
    builds = builds_of(project, app)

    for url in (
        "/api/projects",
        f"/api/projects/{project['id']}",
        f"/api/projects/{project['id']}/applications",
        builds,
        f"{builds}/{build['buildId']}",
    ):
        r = await client.get(url, headers=token)
        assert r.status_code == 200, (url, r.text)
    r = await client.get(f"{builds}/{build['buildId']}/download", headers=token)
    assert r.status_code == 302, r.text

    r = await client.post(
        f"{builds}/upload-link", json={"fileName": "a.apk", "fileSize": 1}, headers=token
    )
    problem = assert_problem(r, 403, "insufficient_scope")
    assert "read scope" in problem["detail"]
    r = await client.delete(f"{builds}/{build['buildId']}", headers=token)
    assert_problem(r, 403, "insufficient_scope")
    r = await client.post("/api/projects", json={"name": "From CI"}, headers=token)
    assert_problem(r, 403, "insufficient_scope")


async def test_a_builds_write_token_uploads_but_does_not_manage_the_project(
    client: httpx.AsyncClient, api: Api, owner: Account
) -> None:
    project = await api.project(owner)
    app = await api.application(owner, project["id"])
    ci = as_token(owner, (await create_token(client, owner, scope="builds:write"))["token"])

    build = await api.upload(ci, project["id"], app["id"])
    r = await client.post(
        f"{builds_of(project, app)}/{build['buildId']}/install-link", headers=ci.headers
    )
    assert r.status_code == 201, r.text
    r = await client.delete(f"{builds_of(project, app)}/{build['buildId']}", headers=ci.headers)
    assert r.status_code == 204, r.text

    for method, url, body in (
        ("PUT", f"/api/projects/{project['id']}", {"name": "Renamed"}),
        ("POST", f"/api/projects/{project['id']}/applications", {"name": "Another"}),
        ("DELETE", f"/api/projects/{project['id']}/applications/{app['id']}", None),
        ("POST", "/api/projects", {"name": "From CI"}),
    ):
        r = await client.request(method, url, json=body, headers=ci.headers)
        assert_problem(r, 403, "insufficient_scope")


async def test_a_builds_write_token_distributes_to_members_but_invites_no_one(
    app: FastAPI, client: httpx.AsyncClient, api: Api, owner: Account
) -> None:
    """Naming an e-mail that is not a member's in a distribution (or a verify's) invites it
    into the project: a builds:write token, refused /invitations and groups/*/testers, is
    refused that too; distributing to members and groups keeps working with it."""
    project = await api.project(owner)
    app_ = await api.application(owner, project["id"])
    tess = await api.register("tess@example.com")
    await api.add_member(owner, project["id"], tess, "tester")
    ci = as_token(owner, (await create_token(client, owner, scope="builds:write"))["token"])
    build = await api.upload(ci, project["id"], app_["id"])
    distribute = f"{builds_of(project, app_)}/{build['buildId']}/distribute"

    async def jobs() -> int:
        async with app.state.ctx.sessions() as db:
            return int(await db.scalar(select(func.count()).select_from(Job)) or 0)

    before = await jobs()
    r = await client.post(
        distribute, json={"emails": [tess.email, "stranger@example.com"]}, headers=ci.headers
    )

    problem = assert_problem(r, 403, "insufficient_scope")
    assert problem["detail"] == (
        "This API token has the builds:write scope; naming an e-mail that is not a member's "
        "invites them into the project, which needs a token without a scope (as /invitations "
        "does)"
    )
    r = await client.get(f"/api/projects/{project['id']}/invitations", headers=owner.headers)
    assert r.json()["invitations"] == []
    assert await jobs() == before  # no mail, no distribution

    r = await client.post(
        distribute, json={"groups": ["everyone"], "emails": [tess.email]}, headers=ci.headers
    )
    assert r.status_code == 200, r.text
    assert r.json()["notInvited"] == []
    # A login (or a token without a scope) invites as before.
    r = await client.post(distribute, json={"emails": ["stranger@example.com"]},
                          headers=owner.headers)  # fmt: skip
    assert r.status_code == 200, r.text
    assert r.json()["invited"] == ["stranger@example.com"]


async def test_a_builds_write_tokens_verify_distributes_to_members_but_invites_no_one(
    client: httpx.AsyncClient, api: Api, owner: Account
) -> None:
    project = await api.project(owner)
    app_ = await api.application(owner, project["id"])
    ci = as_token(owner, (await create_token(client, owner, scope="builds:write"))["token"])
    builds = builds_of(project, app_)

    async def upload() -> str:
        r = await client.post(
            f"{builds}/upload-link", json={"fileName": "a.apk", "fileSize": 4}, headers=ci.headers
        )
        assert r.status_code == 201, r.text
        link = r.json()
        r = await client.put(
            link["uploadUrl"], content=b"PK\x03\x04", headers=link["uploadHeaders"]
        )
        assert r.status_code == 200, r.text
        return str(link["buildId"])

    build_id = await upload()
    r = await client.post(
        f"{builds}/verify",
        json={"buildId": build_id, "distribute": {"emails": ["stranger@example.com"]}},
        headers=ci.headers,
    )
    assert_problem(r, 403, "insufficient_scope")
    r = await client.get(f"{builds}/{build_id}", headers=owner.headers)
    assert r.json()["status"] == "pending"  # nothing verified without the rights it asked for

    r = await client.post(
        f"{builds}/verify",
        json={"buildId": build_id, "distribute": {"emails": [owner.email]}},
        headers=ci.headers,
    )
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "ready"
    r = await client.get(f"/api/projects/{project['id']}/invitations", headers=owner.headers)
    assert r.json()["invitations"] == []


async def test_a_scope_does_not_lift_the_users_role(
    client: httpx.AsyncClient, api: Api, owner: Account
) -> None:
    project = await api.project(owner)
    app = await api.application(owner, project["id"])
    tester = await api.register("tester@example.com")
    await api.add_member(owner, project["id"], tester, "tester")
    token = bearer((await create_token(client, tester, scope="builds:write"))["token"])

    r = await client.post(
        f"{builds_of(project, app)}/upload-link",
        json={"fileName": "a.apk", "fileSize": 1},
        headers=token,
    )

    assert_problem(r, 403, "insufficient_role")


async def test_a_token_restricted_to_projects_reaches_only_those(
    client: httpx.AsyncClient, api: Api, owner: Account
) -> None:
    allowed, other = await api.project(owner, "Allowed"), await api.project(owner, "Other")
    app = await api.application(owner, allowed["id"])
    ci = as_token(owner, (await create_token(client, owner, projectIds=[allowed["id"]]))["token"])

    r = await client.get("/api/projects", headers=ci.headers)
    assert [p["name"] for p in r.json()["projects"]] == ["Allowed"]
    # Without a scope it does all the owner may, there.
    await api.upload(ci, allowed["id"], app["id"])
    r = await client.put(
        f"/api/projects/{allowed['id']}", json={"name": "Renamed"}, headers=ci.headers
    )
    assert r.status_code == 200, r.text
    await api.application(ci, allowed["id"], "Made by CI")

    for method, url in (
        ("GET", f"/api/projects/{other['id']}"),
        ("GET", f"/api/projects/{other['id']}/applications"),
        ("DELETE", f"/api/projects/{other['id']}"),
    ):
        r = await client.request(method, url, headers=ci.headers)
        problem = assert_problem(r, 403, "token_not_allowed")
        assert "restricted" in problem["detail"]
    r = await client.post("/api/projects", json={"name": "From CI"}, headers=ci.headers)
    assert_problem(r, 403, "token_not_allowed")


async def test_a_restricted_token_whose_projects_are_gone_reaches_nothing(
    client: httpx.AsyncClient, api: Api, owner: Account
) -> None:
    doomed, kept = await api.project(owner, "Doomed"), await api.project(owner, "Kept")
    token = bearer((await create_token(client, owner, projectIds=[doomed["id"]]))["token"])
    r = await client.delete(f"/api/projects/{doomed['id']}", headers=owner.headers)
    assert r.status_code == 204, r.text

    r = await client.get("/api/projects", headers=token)

    assert r.json()["projects"] == []
    r = await client.get(f"/api/projects/{kept['id']}", headers=token)
    assert_problem(r, 403, "token_not_allowed")


async def test_a_limited_token_still_reads_the_account_and_logs_out_nothing(
    client: httpx.AsyncClient, api: Api, owner: Account
) -> None:
    project = await api.project(owner)
    token = bearer(
        (await create_token(client, owner, scope="read", projectIds=[project["id"]]))["token"]
    )

    r = await client.get("/api/auth/me", headers=token)
    assert r.status_code == 200, r.text
    assert r.json()["id"] == owner.user["id"]
    r = await client.post("/api/auth/logout", headers=token)
    assert r.status_code == 204, r.text
    r = await client.get("/api/auth/me", headers=owner.headers)  # the login lives on
    assert r.status_code == 200, r.text

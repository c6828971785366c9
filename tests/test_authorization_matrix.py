"""Who may call what, generated from the app's own routes so that no new route can escape it.

Every /api route with a path parameter is checked for: no token (401), a registered stranger
(403), an unknown project (404 for anyone with a valid token), unknown ids below the project
(404), and the contract's minimum role (the role just below gets 403, the minimum role succeeds).
A route missing from MINIMUM_ROLE (or, with a body, from BODIES) fails the suite until the
contract's rule for it is written down here.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.routing import APIRoute, iter_route_contexts

from buildbay.config import Settings
from tests.builds.android_files import APK
from tests.conftest import Account, Api, assert_problem

# The contract's minimum role for each route (Projects, members and roles).
MINIMUM_ROLE: dict[tuple[str, str], str] = {
    ("GET", "/api/project/{id}"): "tester",
    ("GET", "/api/projects/{id}"): "tester",
    ("PUT", "/api/projects/{id}"): "admin",
    ("DELETE", "/api/projects/{id}"): "owner",
    ("GET", "/api/projects/{id}/members"): "tester",
    ("POST", "/api/projects/{id}/members"): "admin",
    ("PUT", "/api/projects/{id}/members/{userId}"): "admin",
    # Removing *another* member; leaving oneself is tested in tests/projects/test_members.py.
    ("DELETE", "/api/projects/{id}/members/{userId}"): "admin",
    ("GET", "/api/projects/{id}/applications"): "tester",
    ("POST", "/api/projects/{id}/applications"): "admin",
    ("GET", "/api/projects/{id}/applications/{appId}"): "tester",
    ("PUT", "/api/projects/{id}/applications/{appId}"): "admin",
    ("DELETE", "/api/projects/{id}/applications/{appId}"): "admin",
    ("GET", "/api/app-distribution/{projectId}/{appId}/builds"): "tester",
    ("POST", "/api/app-distribution/{projectId}/{appId}/builds/upload-link"): "developer",
    ("POST", "/api/app-distribution/{projectId}/{appId}/builds/verify"): "developer",
    ("GET", "/api/app-distribution/{projectId}/{appId}/builds/latest"): "tester",
    ("GET", "/api/app-distribution/{projectId}/{appId}/builds/{buildId}"): "tester",
    ("GET", "/api/app-distribution/{projectId}/{appId}/builds/{buildId}/download"): "tester",
    ("DELETE", "/api/app-distribution/{projectId}/{appId}/builds/{buildId}"): "developer",
    ("GET", "/api/app-distribution/{projectId}/{appId}/builds/{buildId}/icon"): "tester",
    ("POST", "/api/app-distribution/{projectId}/{appId}/builds/{buildId}/install-link"): "tester",
    ("GET", "/api/app-distribution/{projectId}/{appId}/builds/{buildId}/install-links"): "tester",
    # Another member's link; a tester may revoke its own (tests/builds/test_install_links.py).
    (
        "DELETE",
        "/api/app-distribution/{projectId}/{appId}/builds/{buildId}/install-links/{linkId}",
    ): "developer",
}
# Routes that belong to the calling user rather than to a project: another user's id is 404.
PER_USER = {("DELETE", "/api/account/api-tokens/{id}")}

# "Just below" tester is a registered user who is not a member.
LADDER = ["stranger", "tester", "developer", "admin", "owner"]
PROJECT_PARAMS = {"id", "projectId"}
UNKNOWN = {
    "id": "prj_00000000000000000000000000",
    "projectId": "prj_00000000000000000000000000",
    "appId": "app_00000000000000000000000000",
    "buildId": "bld_00000000000000000000000000",
    "userId": "usr_00000000000000000000000000",
    "linkId": "inl_00000000000000000000000000",
}
UNKNOWN_CODE = {
    "appId": "application_not_found",
    "buildId": "build_not_found",
    "userId": "member_not_found",
    "linkId": "install_link_not_found",
}
UNKNOWN_API_TOKEN = "tok_00000000000000000000000000"
_PARAM = re.compile(r"{(\w+)(?::\w+)?}")


@dataclass
class Accounts:
    owner: Account
    admin: Account
    developer: Account
    tester: Account
    member: Account  # the member whose id fills {userId} (a tester)
    stranger: Account  # registered, member of nothing

    def by_role(self, role: str) -> Account:
        account: Account = getattr(self, role)
        return account


@dataclass
class World:
    """A project with every role among its members, an application and a ready build."""

    ids: dict[str, str]  # path parameter -> existing id
    api_token_id: str  # one of the owner's API tokens


# Valid bodies, so that only authorization decides the answer.
BODIES: dict[tuple[str, str], Callable[[Accounts, World], dict[str, Any]]] = {
    ("PUT", "/api/projects/{id}"): lambda a, w: {"name": "Renamed"},
    ("POST", "/api/projects/{id}/members"): lambda a, w: {
        "email": a.stranger.email,
        "role": "tester",
    },
    ("PUT", "/api/projects/{id}/members/{userId}"): lambda a, w: {"role": "developer"},
    ("POST", "/api/projects/{id}/applications"): lambda a, w: {"name": "Another app"},
    ("PUT", "/api/projects/{id}/applications/{appId}"): lambda a, w: {"name": "Renamed app"},
    ("POST", "/api/app-distribution/{projectId}/{appId}/builds/upload-link"): lambda a, w: {
        "fileName": "next.apk",
        "fileSize": 10,
    },
    ("POST", "/api/app-distribution/{projectId}/{appId}/builds/verify"): lambda a, w: {
        "buildId": w.ids["buildId"]
    },
    (
        "POST",
        "/api/app-distribution/{projectId}/{appId}/builds/{buildId}/install-link",
    ): lambda a, w: {"expiresInHours": 2},
}


@dataclass(frozen=True)
class RouteCase:
    method: str
    path: str  # as declared, e.g. /api/projects/{id}/members/{userId}
    has_body: bool

    @property
    def key(self) -> tuple[str, str]:
        return (self.method, self.path)

    @property
    def params(self) -> list[str]:
        return _PARAM.findall(self.path)

    @property
    def per_user(self) -> bool:
        return self.key in PER_USER

    def url(self, values: dict[str, str]) -> str:
        return _PARAM.sub(lambda m: values[m.group(1)], self.path)

    def __str__(self) -> str:
        return f"{self.method} {self.path}"


def routes_with_path_parameters(app: FastAPI) -> Iterator[RouteCase]:
    for context in iter_route_contexts(app.routes):
        route, path = context.original_route, context.path_format
        if not isinstance(route, APIRoute) or not path or not path.startswith("/api/"):
            continue
        if "{" not in path:
            continue
        for method in sorted(route.methods - {"HEAD"}):
            yield RouteCase(method, path, route.body_field is not None)


@pytest.fixture
def settings(settings: Settings) -> Settings:
    # Each route gets a fresh world, which takes more requests than a minute's free-plan quota.
    settings.rate_limit_enabled = False
    return settings


@pytest.fixture
def cases(app: FastAPI) -> list[RouteCase]:
    found = list(routes_with_path_parameters(app))
    assert found, "no /api route with a path parameter found: has the routing changed?"
    return found


@pytest.fixture
async def accounts(api: Api, owner: Account) -> Accounts:
    return Accounts(
        owner=owner,
        admin=await api.register("admin@example.com"),
        developer=await api.register("developer@example.com"),
        tester=await api.register("tester@example.com"),
        member=await api.register("member@example.com"),
        stranger=await api.register("stranger@example.com"),
    )


async def make_world(api: Api, client: httpx.AsyncClient, a: Accounts) -> World:
    project = await api.project(a.owner, "Matrix")
    for account, role in (
        (a.admin, "admin"),
        (a.developer, "developer"),
        (a.tester, "tester"),
        (a.member, "tester"),
    ):
        await api.add_member(a.owner, project["id"], account, role)
    app = await api.application(a.owner, project["id"])
    # A real APK, so that the build has an icon to fetch.
    build = await api.upload(a.owner, project["id"], app["id"], APK.read_bytes(), "demo.apk")
    r = await client.post(
        f"/api/app-distribution/{project['id']}/{app['id']}/builds/{build['buildId']}/install-link",
        headers=a.owner.headers,
    )
    assert r.status_code == 201, r.text
    link_id = r.json()["linkId"]
    r = await client.post("/api/account/api-tokens", json={"name": "ci"}, headers=a.owner.headers)
    assert r.status_code == 201, r.text
    ids = {
        "id": project["id"],
        "projectId": project["id"],
        "appId": app["id"],
        "buildId": build["buildId"],
        "userId": a.member.user["id"],
        "linkId": link_id,
    }
    return World(ids=ids, api_token_id=r.json()["id"])


async def call(
    client: httpx.AsyncClient,
    case: RouteCase,
    values: dict[str, str],
    world: World,
    accounts: Accounts,
    caller: Account | None,
) -> httpx.Response:
    body = BODIES[case.key](accounts, world) if case.has_body else None
    headers = caller.headers if caller is not None else {}
    return await client.request(case.method, case.url(values), json=body, headers=headers)


def describe(case: RouteCase, who: str, r: httpx.Response) -> str:
    return f"{case} as {who}: {r.status_code} {r.text[:200]}"


def check_problem(
    failures: list[str], case: RouteCase, who: str, r: httpx.Response, status: int, code: str
) -> None:
    try:
        assert_problem(r, status, code)
    except AssertionError:
        failures.append(describe(case, who, r))


def test_every_route_with_a_path_parameter_has_a_rule(cases: list[RouteCase]) -> None:
    declared = {c.key for c in cases}
    unknown_params = {p for c in cases if not c.per_user for p in c.params} - set(UNKNOWN)

    assert declared - set(MINIMUM_ROLE) - PER_USER == set(), "add these to MINIMUM_ROLE"
    assert (set(MINIMUM_ROLE) | PER_USER) - declared == set(), "these routes no longer exist"
    assert {c.key for c in cases if c.has_body} - set(BODIES) == set(), "add a body to BODIES"
    assert unknown_params == set(), "teach make_world and UNKNOWN these parameters"
    assert {p for c in cases if not c.per_user for p in c.params} & PROJECT_PARAMS


async def test_every_route_answers_401_without_a_valid_token(
    api: Api, client: httpx.AsyncClient, accounts: Accounts, cases: list[RouteCase]
) -> None:
    world = await make_world(api, client, accounts)
    failures: list[str] = []
    for case in cases:
        values = {"id": world.api_token_id} if case.per_user else world.ids
        for label, headers in (
            ("nobody", {}),
            ("a malformed token", {"Authorization": "Bearer not-a-token"}),
            ("an unknown API token", {"Authorization": "Bearer bb_" + "A" * 40}),
            ("another scheme", {"Authorization": f"Basic {accounts.owner.access_token}"}),
        ):
            body = BODIES[case.key](accounts, world) if case.has_body else None
            r = await client.request(case.method, case.url(values), json=body, headers=headers)
            try:
                assert_problem(r, 401)
                assert r.headers["www-authenticate"].startswith("Bearer")
            except (AssertionError, KeyError):
                failures.append(describe(case, label, r))

    assert failures == []
    # Nothing was touched on the way.
    r = await client.get(f"/api/projects/{world.ids['id']}", headers=accounts.owner.headers)
    assert r.json()["name"] == "Matrix"


async def test_a_stranger_gets_403_on_every_existing_resource(
    api: Api, client: httpx.AsyncClient, accounts: Accounts, cases: list[RouteCase]
) -> None:
    world = await make_world(api, client, accounts)
    failures: list[str] = []
    for case in cases:
        if case.per_user:
            # Another user's API token is none of the stranger's business: 404, and it lives on.
            values = {"id": world.api_token_id}
            r = await call(client, case, values, world, accounts, accounts.stranger)
            check_problem(failures, case, "a stranger", r, 404, "api_token_not_found")
            continue
        r = await call(client, case, world.ids, world, accounts, accounts.stranger)
        check_problem(failures, case, "a stranger", r, 403, "not_a_member")

    assert failures == []
    r = await client.get("/api/account/api-tokens", headers=accounts.owner.headers)
    assert [t["id"] for t in r.json()["apiTokens"]] == [world.api_token_id]
    r = await client.get(f"/api/projects/{world.ids['id']}/members", headers=accounts.owner.headers)
    assert len(r.json()["members"]) == 5


async def test_an_unknown_project_is_404_for_anyone_with_a_valid_token(
    api: Api, client: httpx.AsyncClient, accounts: Accounts, cases: list[RouteCase]
) -> None:
    world = await make_world(api, client, accounts)
    failures: list[str] = []
    for case in cases:
        if case.per_user:
            values = {"id": UNKNOWN_API_TOKEN}
            r = await call(client, case, values, world, accounts, accounts.owner)
            check_problem(failures, case, "the owner", r, 404, "api_token_not_found")
            continue
        values = world.ids | {p: UNKNOWN[p] for p in PROJECT_PARAMS}
        for who in ("stranger", "tester", "owner"):
            caller = accounts.by_role(who)
            r = await call(client, case, values, world, accounts, caller)
            check_problem(failures, case, f"the {who}", r, 404, "project_not_found")

    assert failures == []


async def test_an_unknown_id_inside_a_known_project_is_404_for_a_member(
    api: Api, client: httpx.AsyncClient, accounts: Accounts, cases: list[RouteCase]
) -> None:
    world = await make_world(api, client, accounts)
    failures: list[str] = []
    checked = 0
    for case in cases:
        if case.per_user:
            continue
        for param in case.params:
            if param in PROJECT_PARAMS:
                continue
            values = world.ids | {param: UNKNOWN[param]}
            r = await call(client, case, values, world, accounts, accounts.owner)
            check_problem(
                failures, case, f"the owner, unknown {param}", r, 404, UNKNOWN_CODE[param]
            )
            checked += 1

    assert failures == []
    assert checked >= 10


async def test_each_route_needs_its_minimum_role(
    api: Api, client: httpx.AsyncClient, accounts: Accounts, cases: list[RouteCase]
) -> None:
    failures: list[str] = []
    for case in cases:
        if case.per_user:
            continue
        minimum = MINIMUM_ROLE[case.key]
        below = LADDER[LADDER.index(minimum) - 1]
        world = await make_world(api, client, accounts)  # the minimum role may delete things

        r = await call(client, case, world.ids, world, accounts, accounts.by_role(below))
        expected_code = "not_a_member" if below == "stranger" else "insufficient_role"
        check_problem(failures, case, f"a {below}", r, 403, expected_code)

        r = await call(client, case, world.ids, world, accounts, accounts.by_role(minimum))
        if not (200 <= r.status_code < 400):
            failures.append(describe(case, f"a {minimum}", r))

    assert failures == []

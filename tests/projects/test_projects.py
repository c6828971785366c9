from __future__ import annotations

import re

import httpx
import pytest

from buildbay.clock import FrozenClock
from tests.conftest import Account, Api, assert_problem
from tests.projects.conftest import StoredFiles

TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
UNKNOWN_PROJECT = "prj_00000000000000000000000000"


async def test_creating_a_project_answers_201_with_the_project(
    client: httpx.AsyncClient, owner: Account
) -> None:
    r = await client.post("/api/projects", json={"name": "Acme"}, headers=owner.headers)

    assert r.status_code == 201, r.text
    body = r.json()
    assert set(body) == {"id", "name", "applicationsCount", "createdAt", "updatedAt"}
    assert isinstance(body["id"], str)
    assert body["id"]
    assert body["name"] == "Acme"
    assert body["applicationsCount"] == 0
    assert TIMESTAMP.match(body["createdAt"])
    assert body["updatedAt"] == body["createdAt"]


async def test_project_name_is_trimmed(client: httpx.AsyncClient, owner: Account) -> None:
    r = await client.post("/api/projects", json={"name": "  Acme \t"}, headers=owner.headers)

    assert r.status_code == 201, r.text
    assert r.json()["name"] == "Acme"


async def test_project_name_of_100_characters_is_accepted(
    client: httpx.AsyncClient, owner: Account
) -> None:
    r = await client.post("/api/projects", json={"name": "n" * 100}, headers=owner.headers)

    assert r.status_code == 201, r.text
    assert r.json()["name"] == "n" * 100


async def test_project_name_outside_1_to_100_characters_is_rejected(
    client: httpx.AsyncClient, owner: Account
) -> None:
    bodies: list[dict[str, object]] = [
        {"name": ""},
        {"name": "   "},  # blank once trimmed
        {"name": "n" * 101},
        {"name": 42},
        {"name": None},
        {},
    ]
    for body in bodies:
        r = await client.post("/api/projects", json=body, headers=owner.headers)

        problem = assert_problem(r, 422, "validation_error")
        assert [e["field"] for e in problem["errors"]] == ["name"], body
        assert problem["errors"][0]["message"]
    r = await client.get("/api/projects", headers=owner.headers)
    assert r.json()["projects"] == []


async def test_project_body_with_unknown_fields_is_rejected(
    client: httpx.AsyncClient, owner: Account
) -> None:
    r = await client.post(
        "/api/projects", json={"name": "Acme", "applicationsCount": 7}, headers=owner.headers
    )

    problem = assert_problem(r, 422, "validation_error")
    assert problem["errors"] == [
        {"field": "applicationsCount", "message": "is not a field of this request"}
    ]


async def test_project_is_readable_at_the_seeds_singular_path_and_the_plural(
    api: Api, client: httpx.AsyncClient, owner: Account
) -> None:
    project = await api.project(owner)

    singular = await client.get(f"/api/project/{project['id']}", headers=owner.headers)
    plural = await client.get(f"/api/projects/{project['id']}", headers=owner.headers)

    assert singular.status_code == 200, singular.text
    assert plural.status_code == 200, plural.text
    assert singular.json() == plural.json() == project


async def test_unknown_project_is_404_at_both_paths(
    client: httpx.AsyncClient, owner: Account
) -> None:
    for path in (f"/api/project/{UNKNOWN_PROJECT}", f"/api/projects/{UNKNOWN_PROJECT}"):
        r = await client.get(path, headers=owner.headers)

        assert_problem(r, 404, "project_not_found")


async def test_applications_count_counts_the_projects_applications(
    api: Api, client: httpx.AsyncClient, owner: Account
) -> None:
    project = await api.project(owner)
    other = await api.project(owner, "Other")
    await api.application(owner, project["id"], "Android")
    await api.application(owner, project["id"], "iOS")
    await api.application(owner, other["id"], "Elsewhere")

    r = await client.get(f"/api/projects/{project['id']}", headers=owner.headers)
    assert r.json()["applicationsCount"] == 2
    r = await client.get("/api/projects", headers=owner.headers)
    counts = {p["id"]: p["applicationsCount"] for p in r.json()["projects"]}
    assert counts == {project["id"]: 2, other["id"]: 1}


async def test_updating_a_project_renames_it_and_moves_updated_at(
    api: Api, client: httpx.AsyncClient, owner: Account, clock: FrozenClock
) -> None:
    project = await api.project(owner)
    clock.advance(minutes=5)

    r = await client.put(
        f"/api/projects/{project['id']}", json={"name": " Renamed "}, headers=owner.headers
    )

    assert r.status_code == 200, r.text
    body = r.json()
    assert body["name"] == "Renamed"
    assert body["createdAt"] == project["createdAt"]
    assert body["updatedAt"] != project["updatedAt"]
    assert body["updatedAt"] > project["updatedAt"]
    r = await client.get(f"/api/project/{project['id']}", headers=owner.headers)
    assert r.json() == body


async def test_updating_a_project_with_an_empty_name_is_rejected(
    api: Api, client: httpx.AsyncClient, owner: Account
) -> None:
    project = await api.project(owner)

    r = await client.put(
        f"/api/projects/{project['id']}", json={"name": " "}, headers=owner.headers
    )

    problem = assert_problem(r, 422, "validation_error")
    assert [e["field"] for e in problem["errors"]] == ["name"]


async def test_project_list_shows_only_the_callers_projects_newest_first(
    api: Api, client: httpx.AsyncClient, owner: Account
) -> None:
    other = await api.register()
    first = await api.project(owner, "First")
    theirs = await api.project(other, "Theirs")
    second = await api.project(owner, "Second")

    r = await client.get("/api/projects", headers=owner.headers)

    assert r.status_code == 200, r.text
    assert r.json() == {"projects": [second, first], "nextCursor": None}
    r = await client.get("/api/projects", headers=other.headers)
    assert r.json() == {"projects": [theirs], "nextCursor": None}


async def test_project_list_includes_projects_the_caller_was_added_to(
    api: Api, client: httpx.AsyncClient, owner: Account
) -> None:
    other = await api.register()
    theirs = await api.project(other, "Theirs")
    await api.add_member(other, theirs["id"], owner, "tester")

    r = await client.get("/api/projects", headers=owner.headers)

    assert [p["id"] for p in r.json()["projects"]] == [theirs["id"]]


async def test_project_list_pages_with_limit_and_cursor(
    api: Api, client: httpx.AsyncClient, owner: Account
) -> None:
    created = [await api.project(owner, f"Project {i}") for i in range(5)]
    newest_first = [p["id"] for p in reversed(created)]

    seen: list[str] = []
    page_sizes: list[int] = []
    cursor: str | None = None
    while True:
        params = {"limit": "2"} | ({"cursor": cursor} if cursor else {})
        r = await client.get("/api/projects", params=params, headers=owner.headers)
        assert r.status_code == 200, r.text
        body = r.json()
        page_sizes.append(len(body["projects"]))
        seen.extend(p["id"] for p in body["projects"])
        cursor = body["nextCursor"]
        if cursor is None:
            break
        assert isinstance(cursor, str)

    assert page_sizes == [2, 2, 1]
    assert seen == newest_first  # no duplicates, no gaps, newest first


@pytest.mark.parametrize("limit", ["0", "101", "²", "9" * 19, "9" * 5000])
async def test_a_limit_out_of_range_is_a_422_however_long(
    client: httpx.AsyncClient, owner: Account, limit: str
) -> None:
    # 5,000 digits: more than int() converts (it raised, and the answer was a 500).
    r = await client.get("/api/projects", params={"limit": limit}, headers=owner.headers)

    assert_problem(r, 422, "validation_error")
    assert r.json()["errors"][0]["field"] == "limit"


async def test_project_list_with_a_limit_equal_to_the_count_has_no_next_cursor(
    api: Api, client: httpx.AsyncClient, owner: Account
) -> None:
    await api.project(owner, "One")
    await api.project(owner, "Two")

    r = await client.get("/api/projects", params={"limit": 2}, headers=owner.headers)

    assert len(r.json()["projects"]) == 2
    assert r.json()["nextCursor"] is None


async def test_project_list_limit_must_be_1_to_100(
    client: httpx.AsyncClient, owner: Account
) -> None:
    for limit in ("0", "101", "-1", "ten"):
        r = await client.get("/api/projects", params={"limit": limit}, headers=owner.headers)

        problem = assert_problem(r, 422, "validation_error")
        assert [e["field"] for e in problem["errors"]] == ["limit"], limit
    for limit in ("1", "100"):
        r = await client.get("/api/projects", params={"limit": limit}, headers=owner.headers)

        assert r.status_code == 200, r.text
        assert r.json() == {"projects": [], "nextCursor": None}


async def test_project_list_with_a_garbage_cursor_is_rejected(
    client: httpx.AsyncClient, owner: Account
) -> None:
    # Not base64; base64 of something that is not an id; a cursor of another shape.
    for cursor in ("garbage!", "bm90LWFuLWlk", "%%%", "x" * 201):
        r = await client.get("/api/projects", params={"cursor": cursor}, headers=owner.headers)

        problem = assert_problem(r, 422)
        assert problem["code"] in {"invalid_cursor", "validation_error"}, cursor
        assert [e["field"] for e in problem["errors"]] == ["cursor"], cursor


async def test_owner_deletes_the_project_and_it_is_gone(
    api: Api, client: httpx.AsyncClient, owner: Account
) -> None:
    project = await api.project(owner)

    r = await client.delete(f"/api/projects/{project['id']}", headers=owner.headers)

    assert r.status_code == 204, r.text
    assert r.content == b""
    r = await client.get(f"/api/projects/{project['id']}", headers=owner.headers)
    assert_problem(r, 404, "project_not_found")
    r = await client.delete(f"/api/projects/{project['id']}", headers=owner.headers)
    assert_problem(r, 404, "project_not_found")
    r = await client.get("/api/projects", headers=owner.headers)
    assert r.json() == {"projects": [], "nextCursor": None}


async def test_admin_cannot_delete_the_project(
    api: Api, client: httpx.AsyncClient, owner: Account
) -> None:
    admin = await api.register()
    project = await api.project(owner)
    await api.add_member(owner, project["id"], admin, "admin")

    r = await client.delete(f"/api/projects/{project['id']}", headers=admin.headers)

    assert_problem(r, 403, "insufficient_role")
    r = await client.get(f"/api/projects/{project['id']}", headers=owner.headers)
    assert r.status_code == 200


async def test_deleting_a_project_removes_its_applications_builds_and_files(
    api: Api, client: httpx.AsyncClient, owner: Account, stored_files: StoredFiles
) -> None:
    project = await api.project(owner)
    kept = await api.project(owner, "Kept")
    app = await api.application(owner, project["id"])
    kept_app = await api.application(owner, kept["id"])
    build = await api.upload(owner, project["id"], app["id"])
    kept_build = await api.upload(owner, kept["id"], kept_app["id"])
    assert stored_files(project["id"], build["buildId"])
    r = await client.get(build["downloadUrl"], headers=owner.headers)
    signed_file_url = r.headers["location"]

    r = await client.delete(f"/api/projects/{project['id']}", headers=owner.headers)

    assert r.status_code == 204, r.text
    assert stored_files(project["id"]) == []
    r = await client.get(signed_file_url)
    assert_problem(r, 404, "object_not_found")
    r = await client.get(
        f"/api/projects/{project['id']}/applications/{app['id']}", headers=owner.headers
    )
    assert_problem(r, 404, "project_not_found")
    builds = f"/api/app-distribution/{project['id']}/{app['id']}/builds"
    r = await client.get(f"{builds}/{build['buildId']}", headers=owner.headers)
    assert_problem(r, 404, "project_not_found")
    # The other project keeps its application, build and file.
    assert stored_files(kept["id"], kept_build["buildId"])
    r = await client.get(
        f"/api/app-distribution/{kept['id']}/{kept_app['id']}/builds", headers=owner.headers
    )
    assert [b["buildId"] for b in r.json()["builds"]] == [kept_build["buildId"]]


# Bidirectional embeddings, overrides and isolates (U+202A..U+202E, U+2066..U+2069), and names
# that show nothing at all.
REFUSED_NAMES = {
    "Acme\u202egnp.exe": "contains a bidirectional control character (U+202E)",
    "\u202aAcme": "contains a bidirectional control character (U+202A)",
    "Acme\u2066x\u2069": "contains a bidirectional control character (U+2066)",
    "Ac\u0007me": "contains a control character (U+0007)",
    "\u200b\u200c\u200d": "has no visible character",
    "\ufeff\u2060 \u200b": "has no visible character",
}


@pytest.mark.parametrize(("name", "message"), REFUSED_NAMES.items(), ids=range(6))
async def test_a_project_name_with_bidi_controls_or_nothing_visible_is_422(
    client: httpx.AsyncClient, api: Api, owner: Account, name: str, message: str
) -> None:
    r = await client.post("/api/projects", json={"name": name}, headers=owner.headers)

    body = assert_problem(r, 422, "validation_error")
    assert body["errors"] == [{"field": "name", "message": message}]
    assert body["detail"] == f"name: {message}"
    project = await api.project(owner)
    r = await client.put(
        f"/api/projects/{project['id']}", json={"name": name}, headers=owner.headers
    )
    assert_problem(r, 422, "validation_error")


async def test_a_project_name_may_hold_right_to_left_text_and_emoji_joiners(
    client: httpx.AsyncClient, owner: Account
) -> None:
    for name in ("\u05e9\u05dc\u05d5\u05dd", "Team \U0001f468\u200d\U0001f469\u200d\U0001f467"):
        r = await client.post("/api/projects", json={"name": name}, headers=owner.headers)
        assert r.status_code == 201, r.text
        assert r.json()["name"] == name


async def test_an_owner_cannot_have_two_projects_of_one_name_in_any_case(
    api: Api, client: httpx.AsyncClient, owner: Account
) -> None:
    """CI's `--project Acme` must name one project: an owner's projects differ in name,
    regardless of case. Someone else's project may have the name."""
    acme = await api.project(owner, "Acme")
    for taken in ("Acme", "ACME", " acme "):
        r = await client.post("/api/projects", json={"name": taken}, headers=owner.headers)
        body = assert_problem(r, 409, "name_taken")
        assert body["detail"] == f"You already own a project named {taken.strip()}"
    other = await api.register()
    assert (await api.project(other, "Acme"))["name"] == "Acme"

    beta = await api.project(owner, "Beta")
    r = await client.put(
        f"/api/projects/{beta['id']}", json={"name": "acme"}, headers=owner.headers
    )
    assert_problem(r, 409, "name_taken")
    # Renaming a project to its own name in another case is no clash.
    r = await client.put(
        f"/api/projects/{acme['id']}", json={"name": "ACME"}, headers=owner.headers
    )
    assert r.status_code == 200, r.text
    names = [
        p["name"]
        for p in (await client.get("/api/projects", headers=owner.headers)).json()["projects"]
    ]
    assert sorted(names) == ["ACME", "Beta"]


async def test_a_rename_clashes_with_any_owners_project(
    api: Api, client: httpx.AsyncClient, owner: Account
) -> None:
    co_owner = await api.register()
    shared = await api.project(owner, "Shared")
    await api.add_member(owner, shared["id"], co_owner, "owner")
    await api.project(co_owner, "Mobile")
    r = await client.put(
        f"/api/projects/{shared['id']}", json={"name": "mobile"}, headers=owner.headers
    )
    body = assert_problem(r, 409, "name_taken")
    assert body["detail"] == "An owner of this project already owns a project named mobile"

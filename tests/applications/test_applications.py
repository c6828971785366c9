from __future__ import annotations

import re
from typing import Any

import httpx

from buildbay.clock import FrozenClock
from tests.applications.conftest import StoredFiles
from tests.conftest import Account, Api, assert_problem

TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
UNKNOWN_APP = "app_00000000000000000000000000"
PLATFORMS = ["android", "ios", "macos", "windows", "linux", "other"]


def apps_path(project: dict[str, Any], app: dict[str, Any] | None = None) -> str:
    path = f"/api/projects/{project['id']}/applications"
    return f"{path}/{app['id']}" if app is not None else path


async def test_creating_an_application_answers_201_with_defaults(
    api: Api, client: httpx.AsyncClient, owner: Account
) -> None:
    project = await api.project(owner)

    r = await client.post(apps_path(project), json={"name": " Acme "}, headers=owner.headers)

    assert r.status_code == 201, r.text
    body = r.json()
    assert set(body) == {
        "id", "projectId", "name", "platform", "bundleId", "retention", "buildsCount", "updateKey",
        "autoDistributeGroups", "installLinkDays", "versionPolicy", "feedbackMode", "createdAt",
        "updatedAt",
    }  # fmt: skip
    assert body["updateKey"].startswith("bbu_")
    assert body["versionPolicy"] == "warn"
    assert body["feedbackMode"] == "testers-only"
    assert body["autoDistributeGroups"] == ["everyone"]
    assert body["installLinkDays"] == 14
    assert body["retention"] == {
        "keepLast": None,
        "keepDays": None,
        "protect": {"groups": True, "channels": True},
    }
    assert isinstance(body["id"], str)
    assert body["id"]
    assert body["projectId"] == project["id"]
    assert body["name"] == "Acme"
    assert body["platform"] == "other"
    assert body["bundleId"] is None
    assert body["buildsCount"] == 0
    assert TIMESTAMP.match(body["createdAt"])
    assert body["updatedAt"] == body["createdAt"]
    r = await client.get(apps_path(project, body), headers=owner.headers)
    assert r.status_code == 200, r.text
    assert r.json() == body
    r = await client.get(f"/api/projects/{project['id']}", headers=owner.headers)
    assert r.json()["applicationsCount"] == 1


async def test_application_takes_every_platform_and_a_bundle_id(
    api: Api, client: httpx.AsyncClient, owner: Account
) -> None:
    project = await api.project(owner)

    for platform in PLATFORMS:
        r = await client.post(
            apps_path(project),
            json={"name": f"On {platform}", "platform": platform, "bundleId": "com.example.app"},
            headers=owner.headers,
        )

        assert r.status_code == 201, r.text
        assert r.json()["platform"] == platform
        assert r.json()["bundleId"] == "com.example.app"


async def test_application_fields_are_validated(
    api: Api, client: httpx.AsyncClient, owner: Account
) -> None:
    project = await api.project(owner)
    cases: list[tuple[dict[str, object], str]] = [
        ({"name": "A", "platform": "symbian"}, "platform"),
        ({"name": "A", "platform": "Android"}, "platform"),
        ({"name": "A", "platform": None}, "platform"),
        ({"name": "A", "bundleId": "com example app"}, "bundleId"),
        ({"name": "A", "bundleId": ".com.example"}, "bundleId"),
        ({"name": "A", "bundleId": "com/example"}, "bundleId"),
        ({"name": "A", "bundleId": ""}, "bundleId"),
        ({"name": "A", "bundleId": "c" * 256}, "bundleId"),
        ({"name": ""}, "name"),
        ({"name": "   "}, "name"),
        ({"name": "n" * 101}, "name"),
        ({"platform": "ios"}, "name"),
        ({"name": "A", "buildsCount": 3}, "buildsCount"),
        ({"name": "A", "projectId": "prj_00000000000000000000000000"}, "projectId"),
    ]
    for body, field in cases:
        r = await client.post(apps_path(project), json=body, headers=owner.headers)

        problem = assert_problem(r, 422, "validation_error")
        assert [e["field"] for e in problem["errors"]] == [field], body
    r = await client.get(apps_path(project), headers=owner.headers)
    assert r.json() == {"applications": [], "nextCursor": None}


async def test_unknown_application_is_404(
    api: Api, client: httpx.AsyncClient, owner: Account
) -> None:
    project = await api.project(owner)
    other_project = await api.project(owner, "Other")
    elsewhere = await api.application(owner, other_project["id"])

    for app_id in (UNKNOWN_APP, elsewhere["id"]):  # an id of another project's app is unknown here
        path = f"{apps_path(project)}/{app_id}"
        for method in ("GET", "PUT", "DELETE"):
            body = {"name": "x"} if method == "PUT" else None
            r = await client.request(method, path, json=body, headers=owner.headers)

            assert_problem(r, 404, "application_not_found")
    r = await client.get(apps_path(other_project, elsewhere), headers=owner.headers)
    assert r.json() == elsewhere


async def test_update_changes_only_the_fields_sent(
    api: Api, client: httpx.AsyncClient, owner: Account, clock: FrozenClock
) -> None:
    project = await api.project(owner)
    app = await api.application(
        owner, project["id"], "Acme", platform="android", bundleId="com.acme.app"
    )
    clock.advance(minutes=1)

    r = await client.put(apps_path(project, app), json={"platform": "ios"}, headers=owner.headers)

    assert r.status_code == 200, r.text
    updated = r.json()
    assert updated.pop("warnings") == []
    assert updated["updatedAt"] > app["updatedAt"]
    assert updated == app | {"platform": "ios", "updatedAt": updated["updatedAt"]}

    r = await client.put(
        apps_path(project, app), json={"name": " Acme 2 ", "bundleId": None}, headers=owner.headers
    )
    assert r.status_code == 200, r.text
    renamed = r.json()
    assert [w["code"] for w in renamed.pop("warnings")] == ["renamed"]
    assert renamed == updated | {"name": "Acme 2", "bundleId": None}

    r = await client.put(apps_path(project, app), json={}, headers=owner.headers)
    assert r.status_code == 200, r.text
    assert r.json() == updated | {"name": "Acme 2", "bundleId": None, "warnings": []}
    r = await client.get(apps_path(project, app), headers=owner.headers)
    assert r.json() == updated | {"name": "Acme 2", "bundleId": None}


async def test_a_rename_warns_that_ci_jobs_naming_the_old_name_must_change(
    api: Api, client: httpx.AsyncClient, owner: Account
) -> None:
    project = await api.project(owner)
    app = await api.application(owner, project["id"], "Acme Android")

    renamed = await client.put(
        apps_path(project, app), json={"name": "Acme Droid"}, headers=owner.headers
    )
    recased = await client.put(
        apps_path(project, app), json={"name": "ACME Droid"}, headers=owner.headers
    )
    other = await client.put(
        apps_path(project, app), json={"platform": "android"}, headers=owner.headers
    )

    assert renamed.status_code == 200, renamed.text
    assert renamed.json()["warnings"] == [
        {
            "code": "renamed",
            "detail": "Renamed from Acme Android to Acme Droid: CI jobs that name the "
            'application by name (buildbay upload --app "Acme Android") must change. Its id '
            f"never changes: name it by --app-id {app['id']} instead.",
        }
    ]
    # The CLI finds a name in any case: a change of case breaks no CI job.
    assert (recased.json()["name"], recased.json()["warnings"]) == ("ACME Droid", [])
    assert other.json()["warnings"] == []


async def test_update_refuses_null_for_name_and_platform_and_bad_values(
    api: Api, client: httpx.AsyncClient, owner: Account
) -> None:
    project = await api.project(owner)
    app = await api.application(owner, project["id"], "Acme", platform="android")
    cases: list[tuple[dict[str, object], str]] = [
        ({"name": None}, "name"),
        ({"platform": None}, "platform"),
        ({"name": ""}, "name"),
        ({"platform": "beos"}, "platform"),
        ({"bundleId": "has space"}, "bundleId"),
        ({"buildsCount": 9}, "buildsCount"),
    ]
    for body, field in cases:
        r = await client.put(apps_path(project, app), json=body, headers=owner.headers)

        problem = assert_problem(r, 422, "validation_error")
        assert [e["field"] for e in problem["errors"]] == [field], body
    r = await client.get(apps_path(project, app), headers=owner.headers)
    assert r.json() == app


async def test_builds_count_counts_only_ready_builds(
    api: Api, client: httpx.AsyncClient, owner: Account
) -> None:
    project = await api.project(owner)
    app = await api.application(owner, project["id"])
    other = await api.application(owner, project["id"], "Other")
    await api.upload(owner, project["id"], app["id"], b"one")
    await api.upload(owner, project["id"], app["id"], b"two")
    await api.upload(owner, project["id"], other["id"], b"three")
    r = await client.post(
        f"/api/app-distribution/{project['id']}/{app['id']}/builds/upload-link",
        json={"fileName": "pending.apk", "fileSize": 10},
        headers=owner.headers,
    )
    assert r.status_code == 201, r.text

    r = await client.get(apps_path(project, app), headers=owner.headers)
    assert r.json()["buildsCount"] == 2
    r = await client.get(apps_path(project), headers=owner.headers)
    counts = {a["id"]: a["buildsCount"] for a in r.json()["applications"]}
    assert counts == {app["id"]: 2, other["id"]: 1}


async def test_application_list_pages_newest_first(
    api: Api, client: httpx.AsyncClient, owner: Account
) -> None:
    project = await api.project(owner)
    created = [await api.application(owner, project["id"], f"App {i}") for i in range(5)]
    elsewhere = await api.project(owner, "Elsewhere")
    await api.application(owner, elsewhere["id"], "Not listed")

    seen: list[str] = []
    page_sizes: list[int] = []
    cursor: str | None = None
    while True:
        params = {"limit": "2"} | ({"cursor": cursor} if cursor else {})
        r = await client.get(apps_path(project), params=params, headers=owner.headers)
        assert r.status_code == 200, r.text
        body = r.json()
        assert set(body) == {"applications", "nextCursor"}
        page_sizes.append(len(body["applications"]))
        seen.extend(a["id"] for a in body["applications"])
        cursor = body["nextCursor"]
        if cursor is None:
            break

    assert page_sizes == [2, 2, 1]
    assert seen == [a["id"] for a in reversed(created)]
    r = await client.get(apps_path(project), headers=owner.headers)
    assert r.json() == {"applications": list(reversed(created)), "nextCursor": None}


async def test_application_list_rejects_bad_limits_and_cursors(
    api: Api, client: httpx.AsyncClient, owner: Account
) -> None:
    project = await api.project(owner)
    for params, field in (
        ({"limit": "0"}, "limit"),
        ({"limit": "101"}, "limit"),
        ({"cursor": "not a cursor"}, "cursor"),
    ):
        r = await client.get(apps_path(project), params=params, headers=owner.headers)

        problem = assert_problem(r, 422)
        assert [e["field"] for e in problem["errors"]] == [field], params


async def test_deleting_an_application_removes_its_builds_and_files(
    api: Api, client: httpx.AsyncClient, owner: Account, stored_files: StoredFiles
) -> None:
    project = await api.project(owner)
    app = await api.application(owner, project["id"])
    kept = await api.application(owner, project["id"], "Kept")
    build = await api.upload(owner, project["id"], app["id"])
    kept_build = await api.upload(owner, project["id"], kept["id"])
    assert stored_files(app["id"], build["buildId"])

    r = await client.delete(apps_path(project, app), headers=owner.headers)

    assert r.status_code == 204, r.text
    assert r.content == b""
    assert stored_files(app["id"]) == []
    assert stored_files(kept["id"], kept_build["buildId"])
    r = await client.get(apps_path(project, app), headers=owner.headers)
    assert_problem(r, 404, "application_not_found")
    r = await client.get(
        f"/api/app-distribution/{project['id']}/{app['id']}/builds/{build['buildId']}",
        headers=owner.headers,
    )
    assert_problem(r, 404, "application_not_found")
    r = await client.get(f"/api/projects/{project['id']}", headers=owner.headers)
    assert r.json()["applicationsCount"] == 1
    r = await client.get(apps_path(project), headers=owner.headers)
    assert [a["id"] for a in r.json()["applications"]] == [kept["id"]]
    assert r.json()["applications"][0]["buildsCount"] == 1


async def test_tester_reads_applications_but_cannot_change_them(
    api: Api, client: httpx.AsyncClient, owner: Account
) -> None:
    tester = await api.register()
    project = await api.project(owner)
    app = await api.application(owner, project["id"])
    await api.add_member(owner, project["id"], tester, "tester")

    # As the owner sees it, less the update key (shown to developers and above).
    seen = {**app, "updateKey": None}
    r = await client.get(apps_path(project), headers=tester.headers)
    assert r.status_code == 200, r.text
    assert r.json() == {"applications": [seen], "nextCursor": None}
    r = await client.get(apps_path(project, app), headers=tester.headers)
    assert r.status_code == 200, r.text
    assert r.json() == seen

    r = await client.post(apps_path(project), json={"name": "Mine"}, headers=tester.headers)
    assert_problem(r, 403, "insufficient_role")
    r = await client.put(apps_path(project, app), json={"name": "Mine"}, headers=tester.headers)
    assert_problem(r, 403, "insufficient_role")
    r = await client.delete(apps_path(project, app), headers=tester.headers)
    assert_problem(r, 403, "insufficient_role")
    r = await client.get(apps_path(project), headers=owner.headers)
    assert r.json() == {"applications": [app], "nextCursor": None}


async def test_developer_cannot_create_update_or_delete_applications(
    api: Api, client: httpx.AsyncClient, owner: Account
) -> None:
    developer = await api.register()
    project = await api.project(owner)
    app = await api.application(owner, project["id"])
    await api.add_member(owner, project["id"], developer, "developer")

    r = await client.post(apps_path(project), json={"name": "Mine"}, headers=developer.headers)
    assert_problem(r, 403, "insufficient_role")
    r = await client.put(apps_path(project, app), json={"name": "Mine"}, headers=developer.headers)
    assert_problem(r, 403, "insufficient_role")
    r = await client.delete(apps_path(project, app), headers=developer.headers)
    assert_problem(r, 403, "insufficient_role")
    r = await client.get(apps_path(project), headers=developer.headers)
    assert r.json() == {"applications": [app], "nextCursor": None}


async def test_admin_creates_updates_and_deletes_applications(
    api: Api, client: httpx.AsyncClient, owner: Account
) -> None:
    admin = await api.register()
    project = await api.project(owner)
    await api.add_member(owner, project["id"], admin, "admin")

    app = await api.application(admin, project["id"], "By admin", platform="linux")
    r = await client.put(apps_path(project, app), json={"name": "Renamed"}, headers=admin.headers)
    assert r.status_code == 200, r.text
    assert r.json()["name"] == "Renamed"
    r = await client.delete(apps_path(project, app), headers=admin.headers)
    assert r.status_code == 204, r.text


async def test_a_stranger_cannot_see_a_projects_applications(
    api: Api, client: httpx.AsyncClient, owner: Account
) -> None:
    stranger = await api.register()
    project = await api.project(owner)
    app = await api.application(owner, project["id"])

    r = await client.get(apps_path(project), headers=stranger.headers)
    assert_problem(r, 403, "not_a_member")
    r = await client.get(apps_path(project, app), headers=stranger.headers)
    assert_problem(r, 403, "not_a_member")
    r = await client.post(apps_path(project), json={"name": "x"}, headers=stranger.headers)
    assert_problem(r, 403, "not_a_member")


async def test_an_application_name_with_bidi_controls_or_nothing_visible_is_422(
    client: httpx.AsyncClient, api: Api, owner: Account
) -> None:
    project = await api.project(owner)
    base = f"/api/projects/{project['id']}/applications"
    application = await api.application(owner, project["id"])
    for name, message in (
        ("App\u202e", "contains a bidirectional control character (U+202E)"),
        ("\u2067App", "contains a bidirectional control character (U+2067)"),
        ("\u200b\u200d", "has no visible character"),
    ):
        r = await client.post(base, json={"name": name}, headers=owner.headers)
        body = assert_problem(r, 422, "validation_error")
        assert body["errors"] == [{"field": "name", "message": message}]
        r = await client.put(
            f"{base}/{application['id']}", json={"name": name}, headers=owner.headers
        )
        body = assert_problem(r, 422, "validation_error")
        assert body["errors"] == [{"field": "name", "message": message}]


async def test_a_project_cannot_have_two_applications_of_one_name_in_any_case(
    api: Api, client: httpx.AsyncClient, owner: Account
) -> None:
    project = await api.project(owner)
    android = await api.application(owner, project["id"], "Acme Android")
    r = await client.post(apps_path(project), json={"name": "acme android"}, headers=owner.headers)
    body = assert_problem(r, 409, "name_taken")
    assert body["detail"] == "The project already has an application named acme android"

    ios = await api.application(owner, project["id"], "Acme iOS")
    r = await client.put(
        apps_path(project, ios), json={"name": "ACME ANDROID"}, headers=owner.headers
    )
    assert_problem(r, 409, "name_taken")
    r = await client.put(
        apps_path(project, android), json={"name": "ACME Android"}, headers=owner.headers
    )
    assert r.status_code == 200, r.text  # its own name, in another case

    # Another project may have an application of that name.
    other = await api.project(owner, "Other")
    assert (await api.application(owner, other["id"], "Acme Android"))["name"] == "Acme Android"

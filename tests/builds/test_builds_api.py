"""Reading, deleting and downloading builds, and who may do what."""

from __future__ import annotations

import hashlib
import os
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import pytest
from fastapi import FastAPI
from sqlalchemy import update

from buildbay.builds.models import Build
from buildbay.clock import FrozenClock
from buildbay.storage.local import DOWNLOAD_PATH
from tests.builds.conftest import DATA, Builds
from tests.conftest import Account, assert_problem

BUILD_FIELDS = {
    "newFeedbackCount",
    "channels",
    "rolloutPercents",
    "mandatory",
    "downloadsCount",
    "failureCode",
    "warnings",
    "buildId",
    "projectId",
    "applicationId",
    "fileName",
    "fileSize",
    "sha256",
    "sha512",
    "architecture",
    "sparkleEdSignature",
    "blockmapSize",
    "status",
    "notes",
    "createdAt",
    "verifiedAt",
    "expiresAt",
    "uploadedBy",
    "metadata",
    "metadataError",
    "downloadUrl",
    "installUrl",
    "iconUrl",
    "consoleUrl",
}


def with_query(url: str, **changes: str) -> str:
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    query.update(changes)
    return urlunsplit(parts._replace(query=urlencode(query)))


async def member(builds: Builds, role: str) -> Account:
    account = await builds.api.register()
    await builds.api.add_member(builds.owner, builds.project_id, account, role)
    return account


# -- list -----------------------------------------------------------------------------------------


async def test_list_answers_builds_newest_first(builds: Builds) -> None:
    first = await builds.ready(b"first")
    second = await builds.ready(b"second")
    third = await builds.ready(b"third")

    r = await builds.client.get(builds.base, headers=builds.owner.headers)

    assert r.status_code == 200, r.text
    body = r.json()
    assert set(body) == {"builds", "nextCursor"}
    assert [b["buildId"] for b in body["builds"]] == [
        third["buildId"],
        second["buildId"],
        first["buildId"],
    ]
    assert body["nextCursor"] is None
    assert all(set(b) == BUILD_FIELDS for b in body["builds"])
    assert body["builds"][0] == third


async def test_list_of_an_application_without_builds_is_empty(builds: Builds) -> None:
    r = await builds.client.get(builds.base, headers=builds.owner.headers)

    assert r.status_code == 200, r.text
    assert r.json() == {"builds": [], "nextCursor": None}


@pytest.mark.parametrize("status", ["pending", "ready"])
async def test_list_filters_by_status(builds: Builds, status: str) -> None:
    ready = [await builds.ready(b"one"), await builds.ready(b"two")]
    pending = [await builds.link(b"three"), await builds.pending(b"four")]
    expected = {"ready": ready, "pending": pending}[status]

    r = await builds.client.get(
        builds.base, params={"status": status}, headers=builds.owner.headers
    )

    assert r.status_code == 200, r.text
    body = r.json()
    assert [b["buildId"] for b in body["builds"]] == [b["buildId"] for b in reversed(expected)]
    assert {b["status"] for b in body["builds"]} == {status}


async def test_list_shows_ready_and_processing_builds_unless_a_status_is_asked_for(
    builds: Builds, app: FastAPI
) -> None:
    ready = await builds.ready(b"ready")
    abandoned = await builds.link(b"never sent")
    refused = await builds.pending(b"refused", sha256="0" * 64)
    assert_problem(await builds.verify(refused["buildId"]), 422, "checksum_mismatch")
    checking = await builds.ready(b"being checked")
    refused_later = await builds.ready(b"refused later")
    async with app.state.ctx.sessions() as db, db.begin():
        for build, status in ((checking, "processing"), (refused_later, "failed")):
            await db.execute(
                update(Build).where(Build.id == build["buildId"]).values(status=status)
            )

    async def listed(**params: str) -> list[tuple[str, str]]:
        r = await builds.client.get(builds.base, params=params, headers=builds.owner.headers)
        assert r.status_code == 200, r.text
        return [(b["buildId"], b["status"]) for b in r.json()["builds"]]

    assert await listed() == [(checking["buildId"], "processing"), (ready["buildId"], "ready")]
    assert await listed(limit="1", sort="version") != []
    assert [i for i, _ in await listed(status="pending")] == [
        refused["buildId"],
        abandoned["buildId"],
    ]
    assert await listed(status="failed") == [(refused_later["buildId"], "failed")]
    # A tester's list was only ever of ready builds given to them.
    tester = await member(builds, "tester")
    r = await builds.client.get(builds.base, headers=tester.headers)
    assert [b["buildId"] for b in r.json()["builds"]] == [ready["buildId"]]


async def test_list_refuses_an_unknown_status(builds: Builds) -> None:
    r = await builds.client.get(
        builds.base, params={"status": "deleted"}, headers=builds.owner.headers
    )

    body = assert_problem(r, 422, "validation_error")
    assert [e["field"] for e in body["errors"]] == ["status"]


async def test_list_pages_with_limit_and_cursor(builds: Builds) -> None:
    made = [await builds.ready(f"build {i}".encode()) for i in range(5)]
    newest_first = [b["buildId"] for b in reversed(made)]

    seen: list[str] = []
    pages = 0
    cursor: str | None = None
    while True:
        params = {"limit": "2"} | ({"cursor": cursor} if cursor else {})
        r = await builds.client.get(builds.base, params=params, headers=builds.owner.headers)
        assert r.status_code == 200, r.text
        body = r.json()
        pages += 1
        assert len(body["builds"]) == (2 if pages < 3 else 1)
        seen += [b["buildId"] for b in body["builds"]]
        cursor = body["nextCursor"]
        if cursor is None:
            break

    assert pages == 3
    assert seen == newest_first


async def test_list_pages_with_a_status_filter(builds: Builds) -> None:
    ready = [await builds.ready(f"ready {i}".encode()) for i in range(3)]
    await builds.link(b"pending")

    r = await builds.client.get(
        builds.base, params={"status": "ready", "limit": 2}, headers=builds.owner.headers
    )
    first = r.json()
    r = await builds.client.get(
        builds.base,
        params={"status": "ready", "limit": 2, "cursor": first["nextCursor"]},
        headers=builds.owner.headers,
    )

    assert r.status_code == 200, r.text
    second = r.json()
    assert [b["buildId"] for b in first["builds"] + second["builds"]] == [
        b["buildId"] for b in reversed(ready)
    ]
    assert second["nextCursor"] is None


@pytest.mark.parametrize(
    ("params", "code", "field"),
    [
        ({"limit": "0"}, "validation_error", "limit"),
        ({"limit": "101"}, "validation_error", "limit"),
        ({"cursor": "not-a-cursor"}, "invalid_cursor", "cursor"),
    ],
)
async def test_list_refuses_a_bad_page_request(
    builds: Builds, params: dict[str, str], code: str, field: str
) -> None:
    r = await builds.client.get(builds.base, params=params, headers=builds.owner.headers)

    body = assert_problem(r, 422, code)
    assert [e["field"] for e in body["errors"]] == [field]


async def test_list_shows_only_this_applications_builds(builds: Builds) -> None:
    mine = await builds.ready()
    other = await builds.api.application(builds.owner, builds.project_id, "Acme iOS")
    await builds.api.upload(builds.owner, builds.project_id, other["id"])

    r = await builds.client.get(builds.base, headers=builds.owner.headers)

    assert [b["buildId"] for b in r.json()["builds"]] == [mine["buildId"]]


# -- get ------------------------------------------------------------------------------------------


async def test_get_answers_one_build(builds: Builds) -> None:
    build = await builds.ready(notes="RC 1")

    r = await builds.get(build["buildId"])

    assert r.status_code == 200, r.text
    assert r.json() == build
    assert set(r.json()) == BUILD_FIELDS
    assert r.json()["notes"] == "RC 1"


async def test_get_of_an_unknown_build_is_404(builds: Builds) -> None:
    r = await builds.get("bld_01JAAAAAAAAAAAAAAAAAAAAAAA")

    assert_problem(r, 404, "build_not_found")


async def test_get_under_an_unknown_application_or_project_is_404(builds: Builds) -> None:
    build = await builds.ready()

    r = await builds.client.get(
        f"/api/app-distribution/{builds.project_id}/app_nope/builds/{build['buildId']}",
        headers=builds.owner.headers,
    )
    assert_problem(r, 404, "application_not_found")
    r = await builds.client.get(
        f"/api/app-distribution/prj_nope/{builds.app_id}/builds/{build['buildId']}",
        headers=builds.owner.headers,
    )
    assert_problem(r, 404, "project_not_found")


# -- update ---------------------------------------------------------------------------------------


async def test_put_edits_the_notes_and_keeps_mandatory(builds: Builds) -> None:
    build = await builds.ready(notes="RC 1")
    developer = await member(builds, "developer")
    path = f"{builds.base}/{build['buildId']}"

    r = await builds.client.put(path, json={"notes": "  RC 1, with the fix  "},
                                headers=developer.headers)  # fmt: skip

    assert r.status_code == 200, r.text
    assert r.json() == build | {"notes": "RC 1, with the fix"}
    assert (await builds.get(build["buildId"])).json()["notes"] == "RC 1, with the fix"
    r = await builds.client.put(path, json={"mandatory": True}, headers=developer.headers)
    assert r.json() == build | {"notes": "RC 1, with the fix", "mandatory": True}


@pytest.mark.parametrize("cleared", [None, "", "   "])
async def test_put_clears_the_notes(builds: Builds, cleared: str | None) -> None:
    build = await builds.ready(notes="RC 1")

    r = await builds.client.put(
        f"{builds.base}/{build['buildId']}", json={"notes": cleared}, headers=builds.owner.headers
    )

    assert r.status_code == 200, r.text
    assert r.json()["notes"] is None


async def test_put_edits_a_pending_builds_notes(builds: Builds) -> None:
    link = await builds.pending()

    r = await builds.client.put(
        f"{builds.base}/{link['buildId']}", json={"notes": "Night build"},
        headers=builds.owner.headers,
    )  # fmt: skip

    assert r.status_code == 200, r.text
    assert (r.json()["status"], r.json()["notes"]) == ("pending", "Night build")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"notes": "x" * 10_001}, "notes"),
        ({"notes": 7}, "notes"),
        ({"mandatory": None}, "mandatory"),
        ({}, None),
        ({"notes": "ok", "channels": []}, "channels"),
    ],
)
async def test_put_refuses_a_bad_body(builds: Builds, body: dict[str, object],
                                      field: str | None) -> None:  # fmt: skip
    build = await builds.ready(notes="RC 1")

    r = await builds.client.put(
        f"{builds.base}/{build['buildId']}", json=body, headers=builds.owner.headers
    )

    problem = assert_problem(r, 422, "validation_error")
    if field is not None:
        assert field in problem["detail"], problem
    assert (await builds.get(build["buildId"])).json() == build


async def test_a_tester_cannot_edit_the_notes(builds: Builds) -> None:
    build = await builds.ready(notes="RC 1")
    tester = await member(builds, "tester")

    r = await builds.client.put(
        f"{builds.base}/{build['buildId']}", json={"notes": "mine"}, headers=tester.headers
    )

    assert_problem(r, 403, "insufficient_role")
    assert (await builds.get(build["buildId"])).json()["notes"] == "RC 1"


# -- delete ---------------------------------------------------------------------------------------


async def test_delete_removes_the_build_and_its_file(builds: Builds) -> None:
    build = await builds.ready()
    path = next(p for p in (builds.storage.root / "objects").rglob(build["buildId"]))

    r = await builds.client.delete(
        f"{builds.base}/{build['buildId']}", headers=builds.owner.headers
    )

    assert r.status_code == 204
    assert r.content == b""
    assert not path.exists()
    assert not path.with_name(path.name + ".sha256").exists()
    assert_problem(await builds.get(build["buildId"]), 404, "build_not_found")
    r = await builds.client.get(builds.base, headers=builds.owner.headers)
    assert r.json()["builds"] == []


async def test_delete_of_a_pending_build_removes_its_bytes(builds: Builds) -> None:
    link = await builds.pending()

    r = await builds.client.delete(f"{builds.base}/{link['buildId']}", headers=builds.owner.headers)

    assert r.status_code == 204
    assert list((builds.storage.root / "objects").rglob(link["buildId"])) == []
    assert_problem(await builds.verify(link["buildId"]), 404, "build_not_found")


async def test_delete_twice_is_404(builds: Builds) -> None:
    build = await builds.ready()
    url = f"{builds.base}/{build['buildId']}"
    assert (await builds.client.delete(url, headers=builds.owner.headers)).status_code == 204

    r = await builds.client.delete(url, headers=builds.owner.headers)

    assert_problem(r, 404, "build_not_found")


async def test_a_download_url_given_out_before_delete_is_404_after(builds: Builds) -> None:
    build = await builds.ready()
    r = await builds.client.get(build["downloadUrl"], headers=builds.owner.headers)
    signed = r.headers["location"]
    await builds.client.delete(f"{builds.base}/{build['buildId']}", headers=builds.owner.headers)

    r = await builds.client.get(signed)

    assert_problem(r, 404, "object_not_found")


# -- download -------------------------------------------------------------------------------------


async def test_download_redirects_to_a_signed_url_serving_the_exact_bytes(builds: Builds) -> None:
    data = os.urandom(150_000)
    build = await builds.ready(data)

    r = await builds.client.get(
        f"{builds.base}/{build['buildId']}/download", headers=builds.owner.headers
    )

    assert r.status_code == 302
    location = r.headers["location"]
    assert location.startswith(f"http://testserver{DOWNLOAD_PATH}")
    assert {"expires", "signature", "name"} <= dict(parse_qsl(urlsplit(location).query)).keys()
    r = await builds.client.get(location)  # no token: the URL is the credential
    assert r.status_code == 200
    assert r.content == data
    assert hashlib.sha256(r.content).hexdigest() == build["sha256"]
    assert r.headers["content-type"] == "application/octet-stream"
    assert r.headers["content-disposition"] == 'attachment; filename="app-release.apk"'


async def test_download_names_a_non_ascii_file_by_rfc_5987(builds: Builds) -> None:
    build = await builds.ready(DATA, fileName="アプリ 1.ipa")

    r = await builds.client.get(build["downloadUrl"], headers=builds.owner.headers)
    r = await builds.client.get(r.headers["location"])

    assert r.status_code == 200
    assert r.content == DATA
    assert r.headers["content-disposition"] == (
        "attachment; filename*=utf-8''%E3%82%A2%E3%83%97%E3%83%AA%201.ipa"
    )


async def test_download_of_a_pending_build_is_409(builds: Builds) -> None:
    link = await builds.pending()

    r = await builds.client.get(
        f"{builds.base}/{link['buildId']}/download", headers=builds.owner.headers
    )

    assert_problem(r, 409, "build_not_ready")


async def test_download_of_an_unknown_build_is_404(builds: Builds) -> None:
    r = await builds.client.get(
        f"{builds.base}/bld_01JAAAAAAAAAAAAAAAAAAAAAAA/download", headers=builds.owner.headers
    )

    assert_problem(r, 404, "build_not_found")


async def test_the_signed_download_url_works_for_five_minutes(
    builds: Builds, clock: FrozenClock
) -> None:
    build = await builds.ready()
    r = await builds.client.get(build["downloadUrl"], headers=builds.owner.headers)
    signed = r.headers["location"]

    clock.advance(minutes=4, seconds=58)
    assert (await builds.client.get(signed)).content == DATA

    clock.advance(seconds=3)
    r = await builds.client.get(signed)
    assert_problem(r, 403, "url_expired")


@pytest.mark.parametrize("part", ["signature", "name", "expires", "path"])
async def test_a_tampered_download_url_is_403(builds: Builds, part: str) -> None:
    build = await builds.ready()
    other = await builds.ready(b"someone else's build")
    r = await builds.client.get(build["downloadUrl"], headers=builds.owner.headers)
    signed = r.headers["location"]
    query = dict(parse_qsl(urlsplit(signed).query))
    tampered = {
        "signature": lambda: with_query(signed, signature=query["signature"][::-1]),
        "name": lambda: with_query(signed, name="evil.exe"),
        "expires": lambda: with_query(signed, expires=str(int(query["expires"]) + 3600)),
        "path": lambda: signed.replace(build["buildId"], other["buildId"]),
    }[part]()

    r = await builds.client.get(tampered)

    assert_problem(r, 403, "invalid_signature")


async def test_a_download_url_without_its_signature_is_403(builds: Builds) -> None:
    build = await builds.ready()
    r = await builds.client.get(build["downloadUrl"], headers=builds.owner.headers)

    r = await builds.client.get(r.headers["location"].split("?")[0])

    assert_problem(r, 403, "invalid_signature")


# -- roles ----------------------------------------------------------------------------------------


async def test_a_tester_can_list_get_and_download(builds: Builds) -> None:
    build = await builds.ready()
    tester = await member(builds, "tester")

    r = await builds.client.get(builds.base, headers=tester.headers)
    assert r.status_code == 200, r.text
    assert [b["buildId"] for b in r.json()["builds"]] == [build["buildId"]]
    r = await builds.get(build["buildId"], tester)
    assert r.status_code == 200, r.text
    # The build's console page is the developers' (the console refuses a tester there).
    assert build["consoleUrl"].endswith(
        f"/projects/{builds.project_id}/apps/{build['applicationId']}/builds/{build['buildId']}"
    )
    # Nor is triage a tester's (issue 38): no count of new feedback.
    assert r.json() == build | {"consoleUrl": None, "newFeedbackCount": None}
    r = await builds.client.get(build["downloadUrl"], headers=tester.headers)
    assert r.status_code == 302
    assert (await builds.client.get(r.headers["location"])).content == DATA


async def test_a_tester_cannot_upload_verify_or_delete(builds: Builds) -> None:
    link = await builds.pending()
    tester = await member(builds, "tester")

    r = await builds.request_link({"fileName": "a.apk", "fileSize": 10}, tester)
    assert_problem(r, 403, "insufficient_role")
    r = await builds.verify(link["buildId"], tester)
    assert_problem(r, 403, "insufficient_role")
    r = await builds.client.delete(f"{builds.base}/{link['buildId']}", headers=tester.headers)
    assert_problem(r, 403, "insufficient_role")
    r = await builds.get(link["buildId"])
    assert r.json()["status"] == "pending"


async def test_a_developer_can_upload_and_delete(builds: Builds) -> None:
    developer = await member(builds, "developer")

    build = await builds.api.upload(developer, builds.project_id, builds.app_id, DATA)

    assert build["status"] == "ready"
    assert build["uploadedBy"] == developer.user["id"]
    r = await builds.client.delete(f"{builds.base}/{build['buildId']}", headers=developer.headers)
    assert r.status_code == 204


async def test_a_non_member_gets_403_everywhere(builds: Builds) -> None:
    build = await builds.ready()
    stranger = await builds.api.register()

    for r in (
        await builds.client.get(builds.base, headers=stranger.headers),
        await builds.get(build["buildId"], stranger),
        await builds.client.get(build["downloadUrl"], headers=stranger.headers),
        await builds.request_link({"fileName": "a.apk", "fileSize": 10}, stranger),
        await builds.verify(build["buildId"], stranger),
        await builds.client.delete(f"{builds.base}/{build['buildId']}", headers=stranger.headers),
    ):
        assert_problem(r, 403, "not_a_member")


async def test_builds_endpoints_need_a_token(builds: Builds) -> None:
    build = await builds.ready()

    r = await builds.client.get(build["downloadUrl"])

    assert_problem(r, 401)
    assert r.headers["www-authenticate"].startswith("Bearer")


@pytest.mark.parametrize(
    ("file_name", "message"),
    [
        ("app\u200f.apk", "contains an invisible character (U+200F)"),
        ("\ufeffapp.apk", "contains an invisible character (U+FEFF)"),
        ("app\u200b.apk", "contains an invisible character (U+200B)"),
        ("setup\u202ekpa.exe", "contains a bidirectional control character (U+202E)"),
    ],
)
async def test_a_file_name_with_invisible_or_bidi_characters_is_422(
    builds: Builds, file_name: str, message: str
) -> None:
    r = await builds.request_link({"fileName": file_name, "fileSize": 10})

    body = assert_problem(r, 422, "validation_error")
    assert body["errors"] == [{"field": "fileName", "message": message}]

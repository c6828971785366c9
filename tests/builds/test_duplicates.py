"""One build per binary (issue 36): the same bytes as a ready build of the application are that
build, told before any byte is sent when the file's sha256 is declared; the same version code
with other bytes is a warning, or refused under the application's `unique` version policy."""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import replace
from typing import Any

import pytest

from tests.builds.android_files import APK, APK_V1, expected
from tests.builds.conftest import DATA, Builds
from tests.conftest import assert_problem


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


async def pending_ids(builds: Builds) -> list[str]:
    r = await builds.client.get(f"{builds.base}?status=pending", headers=builds.owner.headers)
    assert r.status_code == 200, r.text
    return [b["buildId"] for b in r.json()["builds"]]


async def ready_ids(builds: Builds) -> list[str]:
    r = await builds.client.get(f"{builds.base}?status=ready", headers=builds.owner.headers)
    assert r.status_code == 200, r.text
    return [b["buildId"] for b in r.json()["builds"]]


# -- a duplicate, declared at upload-link ---------------------------------------------------------


async def test_upload_link_of_a_ready_builds_bytes_answers_409_naming_it_and_makes_nothing(
    builds: Builds,
) -> None:
    first = await builds.ready(DATA)

    r = await builds.request_link(
        {"fileName": "again.apk", "fileSize": len(DATA), "sha256": sha(DATA)}
    )

    body = assert_problem(r, 409, "duplicate_build")
    assert body["buildId"] == first["buildId"]
    assert first["buildId"] in body["detail"]
    assert "reuse" in body["detail"]
    assert await pending_ids(builds) == []  # no pending build, no upload address


async def test_upload_link_asked_to_reuse_answers_200_with_the_ready_build(
    builds: Builds,
) -> None:
    first = await builds.ready(DATA, notes="The first one")

    r = await builds.request_link(
        {
            "fileName": "again.apk",
            "fileSize": len(DATA),
            "sha256": sha(DATA).upper(),  # hex in either case
            "onDuplicate": "reuse",
        }
    )

    assert r.status_code == 200, r.text
    body = r.json()
    assert "uploadUrl" not in body
    assert body["buildId"] == first["buildId"]
    assert (body["status"], body["notes"], body["sha256"]) == ("ready", "The first one", sha(DATA))
    assert body == (await builds.get(first["buildId"])).json()
    assert await pending_ids(builds) == []


async def test_what_is_not_a_duplicate_keeps_the_upload_link_answer(builds: Builds) -> None:
    """Other bytes, the bytes of a build still pending, or of another application's build:
    201 with an upload address, as before; and `refuse` is the default, said or not."""
    await builds.ready(DATA)
    pending = await builds.pending(DATA + b"!")
    other_app = await builds.api.application(builds.owner, builds.project_id, "Other")
    elsewhere = replace(builds, app_id=other_app["id"])
    await elsewhere.ready(DATA + b"?")

    for data, where in ((DATA + b"new", builds), (DATA + b"!", builds), (DATA + b"?", builds)):
        for asked in ({}, {"onDuplicate": "refuse"}, {"onDuplicate": "reuse"}):
            r = await where.request_link(
                {"fileName": "app.apk", "fileSize": len(data), "sha256": sha(data), **asked}
            )
            assert r.status_code == 201, r.text
            assert set(r.json()) == {
                "uploadUrl", "buildId", "expiresAt", "uploadMethod", "uploadHeaders", "multipart",
            }  # fmt: skip
            assert r.json()["buildId"] != pending["buildId"]
    r = await builds.request_link(
        {"fileName": "app.apk", "fileSize": 3, "sha256": sha(b"abc"), "onDuplicate": "maybe"}
    )
    assert_problem(r, 422, "validation_error")


# -- a duplicate found at verify -----------------------------------------------------------------


async def test_verify_of_an_undeclared_duplicate_answers_409_and_deletes_the_new_copy(
    builds: Builds,
) -> None:
    first = await builds.ready(DATA)
    copy = await builds.pending(DATA)  # no sha256 declared: upload-link could not tell
    assert await builds.storage.stat(builds.key_of(copy)) is not None

    r = await builds.verify(copy["buildId"], notes="again")

    body = assert_problem(r, 409, "duplicate_build")
    assert body["buildId"] == first["buildId"]
    assert_problem(await builds.get(copy["buildId"]), 404, "build_not_found")
    assert await builds.storage.stat(builds.key_of(copy)) is None  # its bytes went too
    assert_problem(await builds.verify(copy["buildId"]), 404, "build_not_found")
    assert await ready_ids(builds) == [first["buildId"]]
    assert (await builds.get(first["buildId"])).json()["notes"] is None  # untouched


async def test_two_uploads_of_the_same_bytes_verified_at_once_end_as_one_ready_build(
    builds: Builds,
) -> None:
    """On PostgreSQL the verifies interleave between their reads and their writes; the
    application's row lock makes the second see the first."""
    for trial in range(4):
        data = DATA + bytes([trial])
        links = [await builds.pending(data) for _ in range(3)]

        answers = await asyncio.gather(*(builds.verify(link["buildId"]) for link in links))

        statuses = sorted(r.status_code for r in answers)
        assert statuses == [200, 409, 409], [r.text for r in answers]
        ready = next(r.json() for r in answers if r.status_code == 200)
        for refused in (r for r in answers if r.status_code == 409):
            assert assert_problem(refused, 409, "duplicate_build")["buildId"] == ready["buildId"]
        ready_now = await ready_ids(builds)
        assert ready_now.count(ready["buildId"]) == 1
        assert len(ready_now) == trial + 1  # one ready build per distinct file
        assert await pending_ids(builds) == []
        for link in links:
            exists = await builds.storage.stat(builds.key_of(link)) is not None
            assert exists == (link["buildId"] == ready["buildId"])


# -- the same version code with other bytes -------------------------------------------------------


def warnings_of(build: dict[str, Any]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = build["warnings"]
    return found


async def test_the_same_version_code_with_other_bytes_is_a_warning_by_default(
    builds: Builds,
) -> None:
    first = await builds.ready(APK.read_bytes())
    assert warnings_of(first) == []

    second = await builds.ready(APK_V1.read_bytes())  # other bytes, the same versionCode

    code = expected()["versionCode"]
    assert second["metadata"]["versionCode"] == first["metadata"]["versionCode"] == code
    assert warnings_of(second) == [
        {
            "code": "version_exists",
            "detail": f"Build {first['buildId']} has the same version code ({code}) with other "
            "bytes",
            "buildId": first["buildId"],
        }
    ]
    # Shown wherever the build is: on its own, in the list, and on the first one too.
    assert warnings_of((await builds.get(second["buildId"])).json()) == warnings_of(second)
    assert (
        warnings_of((await builds.get(first["buildId"])).json())[0]["buildId"]
        == (second["buildId"])
    )
    r = await builds.client.get(builds.base, headers=builds.owner.headers)
    listed = {b["buildId"]: warnings_of(b) for b in r.json()["builds"]}
    assert listed[second["buildId"]] == warnings_of(second)


async def test_a_tester_is_not_shown_the_warning(builds: Builds) -> None:
    await builds.ready(APK.read_bytes())
    second = await builds.ready(APK_V1.read_bytes())
    tester = await builds.api.register("tester@example.com")
    await builds.api.add_member(builds.owner, builds.project_id, tester, "tester")

    r = await builds.get(second["buildId"], tester)

    assert r.status_code == 200, r.text
    assert r.json()["warnings"] == []


async def test_a_unique_version_policy_refuses_the_same_version_code_with_409(
    builds: Builds,
) -> None:
    r = await builds.client.put(
        f"/api/projects/{builds.project_id}/applications/{builds.app_id}",
        json={"versionPolicy": "unique"},
        headers=builds.owner.headers,
    )
    assert r.status_code == 200, r.text
    assert r.json()["versionPolicy"] == "unique"
    first = await builds.ready(APK.read_bytes())
    second = await builds.pending(APK_V1.read_bytes())

    r = await builds.verify(second["buildId"])

    body = assert_problem(r, 409, "version_exists")
    assert body["buildId"] == first["buildId"]
    assert str(expected()["versionCode"]) in body["detail"]
    build = (await builds.get(second["buildId"])).json()  # kept, saying why, as every refusal
    assert (build["status"], build["failureCode"]) == ("pending", "version_exists")
    assert await ready_ids(builds) == [first["buildId"]]


async def test_two_builds_of_one_version_verified_at_once_under_unique_give_one(
    builds: Builds,
) -> None:
    r = await builds.client.put(
        f"/api/projects/{builds.project_id}/applications/{builds.app_id}",
        json={"versionPolicy": "unique"},
        headers=builds.owner.headers,
    )
    assert r.status_code == 200, r.text
    links = [await builds.pending(f.read_bytes()) for f in (APK, APK_V1)]

    answers = await asyncio.gather(*(builds.verify(link["buildId"]) for link in links))

    assert sorted(r.status_code for r in answers) == [200, 409], [r.text for r in answers]
    assert len(await ready_ids(builds)) == 1


@pytest.mark.parametrize("value", [None, "strict", 1])
async def test_the_version_policy_is_warn_or_unique(builds: Builds, value: object) -> None:
    r = await builds.client.put(
        f"/api/projects/{builds.project_id}/applications/{builds.app_id}",
        json={"versionPolicy": value},
        headers=builds.owner.headers,
    )

    assert_problem(r, 422, "validation_error")
    r = await builds.client.post(
        f"/api/projects/{builds.project_id}/applications",
        json={"name": "Strict", "versionPolicy": "unique"},
        headers=builds.owner.headers,
    )
    assert r.status_code == 201, r.text
    assert r.json()["versionPolicy"] == "unique"

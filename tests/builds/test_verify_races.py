"""Verify sent at the same moment: what it decides holds as it does one call at a time.

On PostgreSQL concurrent verifies interleave between their reads and their writes. On SQLite
the in-process requests interleave at the metadata thread, so the bundle id race shows there
too; the install link race needs PostgreSQL.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from tests.builds.android_files import APK
from tests.builds.conftest import Builds
from tests.builds.test_metadata import INFO, ipa
from tests.conftest import PG_URL, assert_problem

TRIALS = 6
race = pytest.mark.skipif(
    not PG_URL, reason="the race needs PostgreSQL (SQLite's in-process requests never interleave)"
)


async def test_two_builds_of_different_apps_verified_at_once_give_one_mismatch(
    builds: Builds,
) -> None:
    first, second = (
        ipa({**INFO, "CFBundleIdentifier": f"com.example.{name}"}).getvalue()
        for name in ("first", "second")
    )
    for trial in range(TRIALS):
        application = await builds.api.application(
            builds.owner, builds.project_id, f"Without a bundle id {trial}"
        )
        on_app = replace(builds, app_id=application["id"])
        links = [await on_app.pending(data, fileName="Example.ipa") for data in (first, second)]

        answers = await asyncio.gather(*(on_app.verify(link["buildId"]) for link in links))

        statuses = sorted(r.status_code for r in answers)
        assert statuses == [200, 422], [r.text for r in answers]
        ready = next(r for r in answers if r.status_code == 200).json()
        refused = next(r for r in answers if r.status_code == 422)
        assert_problem(refused, 422, "bundle_id_mismatch")
        r = await builds.client.get(
            f"/api/projects/{builds.project_id}/applications/{application['id']}",
            headers=builds.owner.headers,
        )
        assert r.json()["bundleId"] == ready["metadata"]["bundleId"]
        refused_id = next(link["buildId"] for link in links if link["buildId"] != ready["buildId"])
        assert (await on_app.get(refused_id)).json()["status"] == "pending"


@race
@pytest.mark.postgres
async def test_twenty_verifies_with_an_install_link_at_once_create_one_link(
    builds: Builds,
) -> None:
    data = APK.read_bytes()
    for trial in range(TRIALS // 2):
        # An application each: the same bytes again in one would be a duplicate.
        application = await builds.api.application(
            builds.owner, builds.project_id, f"Links {trial}"
        )
        builds = replace(builds, app_id=application["id"])
        link = await builds.pending(data, fileName="demo.apk")
        # Verified once without a link, as a first CI step might: the retries below then skip
        # the storage guard (the build is ready) and meet at the link.
        assert (await builds.verify(link["buildId"])).json()["installUrl"] is None

        answers = await asyncio.gather(
            *(builds.verify(link["buildId"], installLink={"expiresInHours": 48}) for _ in range(20))
        )

        assert [r.status_code for r in answers] == [200] * 20, [r.text for r in answers]
        install_urls = {r.json()["installUrl"] for r in answers}
        assert len(install_urls) == 1
        r = await builds.client.get(
            f"{builds.base}/{link['buildId']}/install-links", headers=builds.owner.headers
        )
        assert r.status_code == 200, r.text
        assert [x["url"] for x in r.json()["installLinks"]] == list(install_urls)

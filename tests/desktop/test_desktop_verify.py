"""Where verify's SHA-512 comes from, and the updaters' fields on a large build checked in the
background."""

from __future__ import annotations

import base64
import hashlib
from typing import Any

import pytest
from fastapi import FastAPI

from buildbay.config import Settings
from tests.builds.conftest import Builds, storage_key_of
from tests.builds.test_metadata import ipa
from tests.builds.test_multipart import Parts, _upload_id, ctx_of
from tests.desktop import files

MiB = files.MiB
INLINE_MAX = 16 * MiB  # above it, verify checks the bytes in the background


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return settings.model_copy(
        update={
            "verify_inline_max_bytes": INLINE_MAX,
            "max_upload_bytes_free": 1024**3,
            "quota_bytes_free": 0,
        }
    )


@pytest.fixture
def parts(builds: Builds) -> Parts:
    return Parts(builds)


def _sha512(data: bytes) -> str:
    return base64.b64encode(hashlib.sha512(data).digest()).decode()


async def _platform(builds: Builds, platform: str) -> None:
    r = await builds.client.put(
        f"/api/projects/{builds.project_id}/applications/{builds.app_id}",
        json={"platform": platform},
        headers=builds.owner.headers,
    )
    assert r.status_code == 200, r.text


async def _pending_with_an_old_sidecar(builds: Builds, data: bytes, name: str) -> dict[str, Any]:
    """A build whose bytes arrived before Buildbay kept the SHA-512 beside them: its sidecar
    has the SHA-256 alone."""
    link = await builds.pending(data, fileName=name)
    path = builds.storage.path_of(storage_key_of(link))
    sidecar = path.with_name(path.name + ".sha256")
    sidecar.write_text(" ".join(sidecar.read_text().split()[:3]) + "\n")
    return link


async def test_a_desktop_build_whose_storage_knows_only_the_sha256_is_read_for_its_sha512(
    builds: Builds,
) -> None:
    await _platform(builds, "macos")
    data = files.dmg()
    link = await _pending_with_an_old_sidecar(builds, data, "Example.dmg")

    r = await builds.verify(link["buildId"], version="1.0")

    assert r.status_code == 200, r.text
    assert r.json()["sha512"] == _sha512(data)


async def test_a_phone_s_build_whose_storage_knows_its_sha256_is_not_read_again(
    builds: Builds,
) -> None:
    """No feed serves an .ipa: its bytes are not read only for a SHA-512."""
    await _platform(builds, "ios")
    data = ipa().getvalue()
    link = await _pending_with_an_old_sidecar(builds, data, "Example.ipa")

    r = await builds.verify(link["buildId"])

    assert r.status_code == 200, r.text
    assert r.json()["sha256"] == hashlib.sha256(data).hexdigest()
    assert r.json()["sha512"] is None


async def test_a_build_uploaded_in_one_put_has_both_digests_from_that_put(
    builds: Builds,
) -> None:
    await _platform(builds, "linux")
    data = files.appimage(size=3 * MiB + 5)
    link = await builds.pending(data, fileName="Example.AppImage")
    info = await builds.storage.stat(storage_key_of(link))
    assert info is not None
    assert info.sha512 == _sha512(data)  # known before verify

    r = await builds.verify(link["buildId"], version="2.0.0")

    assert r.json()["sha512"] == _sha512(data)


@pytest.mark.parametrize(("platform", "hashed"), [("windows", True), ("other", False)])
async def test_parts_are_hashed_through_sha512_as_they_arrive_for_a_desktop_application(
    app: FastAPI, builds: Builds, parts: Parts, platform: str, hashed: bool
) -> None:
    await _platform(builds, platform)
    data = files.msi(12 * MiB + 7)
    link = await parts.link(data, fileName="Example.msi")
    await parts.send_all(link["buildId"], data, [2, 1])
    storage = ctx_of(app).storage
    key = builds.key_of(link)

    await storage.complete_multipart(key, _upload_id(app, key), len(data), 8 * MiB)

    info = await storage.stat(key)
    assert info is not None
    assert info.sha256 == hashlib.sha256(data).hexdigest()  # both known without reading the file
    assert info.sha512 == (_sha512(data) if hashed else None)


async def test_a_large_desktop_build_checked_in_the_background_keeps_the_updaters_fields(
    app: FastAPI, builds: Builds, parts: Parts
) -> None:
    await _platform(builds, "macos")
    data = files.dmg(20 * MiB + 512)
    link = await parts.link(data, fileName="Example-2.0.0.dmg")
    await parts.send_all(link["buildId"], data, [3, 1, 2])
    signature = base64.b64encode(hashlib.sha512(b"x").digest()).decode()

    r = await builds.verify(
        link["buildId"],
        version="2.0.0",
        minimumOsVersion="12.0",
        architecture="arm64",
        sparkleEdSignature=signature,
    )

    assert r.status_code == 202, r.text
    jobs = ctx_of(app).jobs
    assert jobs is not None
    await jobs.run_until_idle()
    build = (await builds.get(link["buildId"])).json()
    assert build["status"] == "ready", build
    assert build["metadata"] == {
        "shortVersion": "2.0.0",
        "minOs": "12.0",
        "fromVerify": ["shortVersion", "minOs"],
    }
    assert (build["architecture"], build["sparkleEdSignature"]) == ("arm64", signature)
    assert build["sha512"] == _sha512(data)


async def test_a_large_build_whose_field_contradicts_it_fails_in_the_background(
    app: FastAPI, builds: Builds, parts: Parts
) -> None:
    await _platform(builds, "linux")
    data = files.appimage(0x3E, size=20 * MiB)  # x86_64
    link = await parts.link(data, fileName="Example.AppImage")
    await parts.send_all(link["buildId"], data, [1, 2, 3])

    assert (await builds.verify(link["buildId"], architecture="arm64")).status_code == 202
    jobs = ctx_of(app).jobs
    assert jobs is not None
    await jobs.run_until_idle()

    build = (await builds.get(link["buildId"])).json()
    assert (build["status"], build["failureCode"]) == ("failed", "metadata_mismatch")
    assert build["metadataError"] == "architecture: the file is built for x64 (x86_64)"

"""Verify reads what a build file says about itself, checks it against the application, and keeps a
build whose file does not parse (with the reason)."""

from __future__ import annotations

import io
import zipfile
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import select

from buildbay.builds.android import parse_apk
from buildbay.devices.models import BuildProfileDevice
from tests.builds.android_files import APK, aab, expected, proto_manifest
from tests.builds.conftest import Builds
from tests.builds.test_metadata import INFO, ipa, profile
from tests.conftest import assert_problem

IPA = ipa().getvalue()


async def _verified(builds: Builds, data: bytes, file_name: str) -> httpx.Response:
    link = await builds.link(data, fileName=file_name)
    assert (await builds.put(link, data)).status_code == 200
    return await builds.verify(link["buildId"])


async def _application(builds: Builds) -> dict[str, Any]:
    r = await builds.client.get(
        f"/api/projects/{builds.project_id}/applications/{builds.app_id}",
        headers=builds.owner.headers,
    )
    assert r.status_code == 200
    body: dict[str, Any] = r.json()
    return body


async def test_an_ipa_build_carries_its_metadata_and_names_the_application(
    builds: Builds,
) -> None:
    assert (await _application(builds))["bundleId"] is None

    r = await _verified(builds, IPA, "Example.ipa")

    assert r.status_code == 200, r.text
    build = r.json()
    assert build["metadata"]["bundleId"] == INFO["CFBundleIdentifier"]
    assert build["metadata"]["shortVersion"] == "2.4.0"
    assert build["metadata"]["buildNumber"] == "812"
    assert build["metadataError"] is None
    listed = await builds.client.get(builds.base, headers=builds.owner.headers)
    assert listed.json()["builds"][0]["metadata"] == build["metadata"]
    application = await _application(builds)
    assert application["bundleId"] == "com.example.app"  # taken from its first ready build
    assert application["platform"] == "ios"


async def test_a_build_of_another_app_is_refused_and_stays_pending(builds: Builds) -> None:
    r = await builds.client.put(
        f"/api/projects/{builds.project_id}/applications/{builds.app_id}",
        json={"bundleId": "com.example.other"},
        headers=builds.owner.headers,
    )
    assert r.status_code == 200, r.text
    link = await builds.link(IPA, fileName="Example.ipa")
    await builds.put(link, IPA)

    problem = assert_problem(await builds.verify(link["buildId"]), 422, "bundle_id_mismatch")
    assert "com.example.app" in problem["detail"]
    assert (await builds.get(link["buildId"])).json()["status"] == "pending"


async def test_a_file_that_is_not_the_ipa_it_claims_is_ready_without_metadata(
    builds: Builds,
) -> None:
    r = await _verified(builds, b"PK\x03\x04 this is not really a zip", "Broken.ipa")

    assert r.status_code == 200, r.text
    build = r.json()
    assert build["status"] == "ready"
    assert build["metadata"] is None
    assert build["metadataError"].startswith("Not a readable .ipa: not a zip archive")
    assert (await _application(builds))["bundleId"] is None


async def test_a_format_not_read_yet_has_neither_metadata_nor_an_error(builds: Builds) -> None:
    build = (await _verified(builds, IPA, "installer.7z")).json()
    assert build["metadata"] is None
    assert build["metadataError"] is None


async def _ipa_build(builds: Builds, short_version: str, build_number: str) -> dict[str, Any]:
    info = {**INFO, "CFBundleShortVersionString": short_version, "CFBundleVersion": build_number}
    r = await _verified(builds, ipa(info).getvalue(), "Example.ipa")
    assert r.status_code == 200, r.text
    build: dict[str, Any] = r.json()
    return build


async def test_builds_can_be_filtered_by_version_name_and_code(builds: Builds) -> None:
    first = await _ipa_build(builds, "1.0.0", "100")
    second = await _ipa_build(builds, "1.1.0", "110")
    third = await _ipa_build(builds, "1.1.0", "111")

    async def ids(**params: str) -> list[str]:
        r = await builds.client.get(builds.base, params=params, headers=builds.owner.headers)
        assert r.status_code == 200, r.text
        return [b["buildId"] for b in r.json()["builds"]]

    assert await ids(versionName="1.1.0") == [third["buildId"], second["buildId"]]
    assert await ids(versionCode="100") == [first["buildId"]]
    assert await ids(versionName="1.1.0", versionCode="110") == [second["buildId"]]
    assert await ids(versionName="9.9.9") == []


async def test_latest_is_the_newest_ready_build_of_the_version_asked(builds: Builds) -> None:
    latest = f"{builds.base}/latest"
    assert_problem(
        await builds.client.get(latest, headers=builds.owner.headers), 404, "build_not_found"
    )
    older = await _ipa_build(builds, "1.0.0", "100")
    newer = await _ipa_build(builds, "2.0.0", "200")
    await builds.link(IPA, fileName="pending.ipa")  # pending builds never count

    r = await builds.client.get(latest, headers=builds.owner.headers)
    assert r.status_code == 200, r.text
    assert r.json()["buildId"] == newer["buildId"]
    assert r.json()["downloadUrl"].endswith(f"/builds/{newer['buildId']}/download")
    r = await builds.client.get(
        latest, params={"versionName": "1.0.0"}, headers=builds.owner.headers
    )
    assert r.json()["buildId"] == older["buildId"]


async def test_an_apk_build_carries_its_metadata_icon_and_names_the_application(
    builds: Builds,
) -> None:
    r = await _verified(builds, APK.read_bytes(), "demo.apk")

    assert r.status_code == 200, r.text
    build = r.json()
    assert build["metadata"]["packageName"] == expected()["packageName"]
    assert build["metadata"]["signingCertificateSha256"] == expected()["certificate"]
    application = await _application(builds)
    assert application["bundleId"] == expected()["packageName"]
    assert application["platform"] == "android"
    icon = await builds.client.get(build["iconUrl"], headers=builds.owner.headers)
    assert icon.status_code == 200
    assert icon.headers["content-type"] == "image/png"
    assert icon.content == parse_apk(io.BytesIO(APK.read_bytes())).icon_png


async def test_an_apk_of_another_package_is_refused(builds: Builds) -> None:
    await _verified(builds, APK.read_bytes(), "demo.apk")  # the application takes its package
    link = await builds.link(aab(), fileName="other.aab")
    await builds.put(link, aab())

    assert_problem(await builds.verify(link["buildId"]), 422, "bundle_id_mismatch")


async def test_a_build_without_an_icon_has_no_icon_url(builds: Builds) -> None:
    build = (await _verified(builds, aab(), "bundle.aab")).json()
    assert build["metadata"]["versionCode"] == 310
    assert build["iconUrl"] is None
    r = await builds.client.get(
        f"{builds.base}/{build['buildId']}/icon", headers=builds.owner.headers
    )
    assert_problem(r, 404, "icon_not_found")


async def test_builds_sort_by_version_code_across_pages(builds: Builds) -> None:
    made = {code: await _ipa_build(builds, "1.0", str(code)) for code in (20, 300, 5, 300, 41)} | {
        "none": (await _ipa_build(builds, "1.0", "1.2.3"))
    }  # not a number: sorts last
    last_300 = made[300]["buildId"]

    seen: list[str] = []
    cursor = None
    while True:
        params = {"sort": "version", "limit": "2", **({"cursor": cursor} if cursor else {})}
        r = await builds.client.get(builds.base, params=params, headers=builds.owner.headers)
        assert r.status_code == 200, r.text
        seen += [b["metadata"]["buildNumber"] for b in r.json()["builds"]]
        cursor = r.json()["nextCursor"]
        if cursor is None:
            break

    assert seen == ["300", "300", "41", "20", "5", "1.2.3"]
    r = await builds.client.get(
        builds.base, params={"sort": "version", "limit": "1"}, headers=builds.owner.headers
    )
    assert r.json()["builds"][0]["buildId"] == last_300  # the newer of the two 300s first
    assert_problem(
        await builds.client.get(builds.base, params={"sort": "size"}, headers=builds.owner.headers),
        422,
        "validation_error",
    )


# -- what a file says meets the API's own rules ------------------------------------------------


def apk_with(old: str, new: str) -> bytes:
    """The fixture APK with one string of its binary manifest (UTF-16) replaced by another of the
    same length (its signature no longer matches; nothing here checks it)."""
    assert len(old) == len(new)
    out = io.BytesIO()
    with zipfile.ZipFile(APK) as source, zipfile.ZipFile(out, "w") as target:
        for entry in source.infolist():
            data = source.read(entry)
            if entry.filename == "AndroidManifest.xml":
                assert old.encode("utf-16-le") in data
                data = data.replace(old.encode("utf-16-le"), new.encode("utf-16-le"))
            target.writestr(entry, data)
    return out.getvalue()


REFUSED_FILES: dict[str, tuple[bytes, str, str]] = {
    # case: (the file, its name, the detail)
    "ipa bundle id of 404 characters": (
        ipa({**INFO, "CFBundleIdentifier": "com." + "a" * 400}).getvalue(),
        "x.ipa",
        "its bundle id (CFBundleIdentifier) is longer than 255 characters",
    ),
    "ipa bundle id with NUL": (
        ipa({**INFO, "CFBundleIdentifier": "com.example\x00app"}).getvalue(),
        "x.ipa",
        "its bundle id (CFBundleIdentifier) is not a bundle id: letters, digits, '.', '_' and "
        "'-', starting with a letter or a digit",
    ),
    "ipa bundle id with a space": (
        ipa({**INFO, "CFBundleIdentifier": "com.example app"}).getvalue(),
        "x.ipa",
        "its bundle id (CFBundleIdentifier) is not a bundle id: letters, digits, '.', '_' and "
        "'-', starting with a letter or a digit",
    ),
    "ipa bundle id with markup": (
        ipa({**INFO, "CFBundleIdentifier": "<b>com.example</b>"}).getvalue(),
        "x.ipa",
        "its bundle id (CFBundleIdentifier) is not a bundle id: letters, digits, '.', '_' and "
        "'-', starting with a letter or a digit",
    ),
    "ipa bundle id with a bidi override": (
        ipa({**INFO, "CFBundleIdentifier": "com.example\u202eppa"}).getvalue(),
        "x.ipa",
        "its bundle id (CFBundleIdentifier) is not a bundle id: letters, digits, '.', '_' and "
        "'-', starting with a letter or a digit",
    ),
    "ipa name with a bidi override": (
        ipa({**INFO, "CFBundleDisplayName": "Example\u202e"}).getvalue(),
        "x.ipa",
        "its app name contains a bidirectional control character (U+202E)",
    ),
    "ipa name of zero-width characters": (
        ipa({**INFO, "CFBundleDisplayName": "\u200b\u200b"}).getvalue(),
        "x.ipa",
        "its app name has no visible character",
    ),
    "ipa version with a control character": (
        ipa({**INFO, "CFBundleShortVersionString": "2.4\x1b[31m"}).getvalue(),
        "x.ipa",
        "its version (CFBundleShortVersionString) contains a control character (U+001B)",
    ),
    "ipa build number of 101 characters": (
        ipa({**INFO, "CFBundleVersion": "1" * 101}).getvalue(),
        "x.ipa",
        "its build number (CFBundleVersion) is longer than 100 characters",
    ),
    "apk package with a space": (
        apk_with("dev.buildbay.demo", "dev.buildbay demo"),
        "x.apk",
        "its package name is not a bundle id: letters, digits, '.', '_' and '-', starting with "
        "a letter or a digit",
    ),
    "apk version name with a bidi override": (
        apk_with("1.4.2", "1.4\u202e2"),
        "x.apk",
        "its versionName contains a bidirectional control character (U+202E)",
    ),
    "aab package with markup": (
        aab(proto_manifest(package="<b>dev.buildbay</b>")),
        "x.aab",
        "its package name is not a bundle id: letters, digits, '.', '_' and '-', starting with "
        "a letter or a digit",
    ),
    "aab version name with NUL": (
        aab(proto_manifest(version_name="3.1\x000")),
        "x.aab",
        "its versionName contains a control character (U+0000)",
    ),
    "aab version code past 32 bits": (
        aab(proto_manifest(version_code=2**40, compiled=False)),
        "x.aab",
        "its versionCode is not a whole number from 0 to 2147483647",
    ),
}


@pytest.mark.parametrize("case", REFUSED_FILES)
async def test_a_file_whose_metadata_breaks_the_api_rules_is_422_and_stays_pending(
    builds: Builds, case: str
) -> None:
    data, file_name, reason = REFUSED_FILES[case]
    link = await builds.link(data, fileName=file_name)
    assert (await builds.put(link, data)).status_code == 200

    for _ in range(2):  # the same answer on a retry, never a 500
        problem = assert_problem(await builds.verify(link["buildId"]), 422, "unreadable_build")
        suffix = file_name.rsplit(".", 1)[1]
        assert problem["detail"] == f"This .{suffix} cannot be taken: {reason}"

    assert (await builds.get(link["buildId"])).json()["status"] == "pending"
    application = await _application(builds)
    assert application["bundleId"] is None
    assert application["platform"] == "other"


# -- an application of a mobile platform takes only its platform's builds ---------------------


def zip_of(entries: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
    return out.getvalue()


async def _platform(builds: Builds, platform: str) -> None:
    r = await builds.client.put(
        f"/api/projects/{builds.project_id}/applications/{builds.app_id}",
        json={"platform": platform},
        headers=builds.owner.headers,
    )
    assert r.status_code == 200, r.text


@pytest.mark.parametrize(
    ("platform", "file_name"),
    [("android", "notes.txt"), ("android", "Example.ipa"), ("ios", "app-release.apk")],
)
async def test_a_file_of_another_platform_is_refused_by_its_name_before_a_byte(
    builds: Builds, platform: str, file_name: str
) -> None:
    await _platform(builds, platform)

    r = await builds.request_link({"fileName": file_name, "fileSize": 100})

    problem = assert_problem(r, 422, "wrong_platform")
    assert file_name in problem["detail"]
    assert problem["detail"].startswith(f"This is an {'iOS' if platform == 'ios' else 'Android'}")
    listed = await builds.client.get(builds.base, headers=builds.owner.headers)
    assert listed.json()["builds"] == []  # no pending build was made


async def test_an_ipa_named_apk_is_refused_by_its_content_and_stays_pending_with_why(
    builds: Builds,
) -> None:
    await _platform(builds, "android")
    link = await builds.link(IPA, fileName="renamed.apk")
    await builds.put(link, IPA)

    problem = assert_problem(await builds.verify(link["buildId"]), 422, "wrong_platform")

    assert problem["detail"] == "This file is an iOS app, and this is an Android application"
    build = (await builds.get(link["buildId"])).json()
    assert build["status"] == "pending"
    assert build["failureCode"] == "wrong_platform"
    assert build["metadataError"] == problem["detail"]
    assert (await _application(builds))["bundleId"] is None  # nothing adopted from it


@pytest.mark.parametrize(
    ("platform", "file_name", "data"),
    [
        ("android", "notes.apk", b"these are release notes, not an app"),
        ("android", "bundle.aab", b"PK\x03\x04 a zip that is cut short"),
        ("ios", "Example.ipa", zip_of({"readme.txt": b"a zip without Payload/"})),
    ],
    ids=["text", "cut-zip", "zip-without-payload"],  # the zip's bytes hold the time it was made
)
async def test_a_mobile_build_whose_metadata_cannot_be_read_is_refused_never_ready(
    builds: Builds, platform: str, file_name: str, data: bytes
) -> None:
    await _platform(builds, platform)
    link = await builds.link(data, fileName=file_name)
    await builds.put(link, data)

    problem = assert_problem(await builds.verify(link["buildId"]), 422, "unreadable_build")

    suffix = file_name.rsplit(".", 1)[1]
    assert problem["detail"].startswith(f"Not a readable .{suffix}: ")  # the parser's reason
    build = (await builds.get(link["buildId"])).json()
    assert build["status"] == "pending"
    assert build["failureCode"] == "unreadable_build"
    assert build["metadataError"] == problem["detail"]
    latest = await builds.client.get(f"{builds.base}/latest", headers=builds.owner.headers)
    assert_problem(latest, 404, "build_not_found")  # nothing is offered


async def test_a_refused_build_becomes_ready_once_the_right_bytes_arrive(builds: Builds) -> None:
    await _platform(builds, "android")
    apk = APK.read_bytes()
    link = await builds.link(apk, fileName="demo.apk")
    broken = b"x" * len(apk)
    await builds.put(link, broken)
    assert_problem(await builds.verify(link["buildId"]), 422, "unreadable_build")

    await builds.put(link, apk)  # a repeat PUT before verify replaces the bytes
    r = await builds.verify(link["buildId"])

    assert r.status_code == 200, r.text
    assert r.json()["status"] == "ready"
    assert r.json()["failureCode"] is None
    assert r.json()["metadataError"] is None
    assert r.json()["expiresAt"] is None


async def test_an_application_that_took_an_apk_refuses_other_files_from_then_on(
    builds: Builds,
) -> None:
    """The platform an application of platform `other` takes from its first Android build."""
    await _verified(builds, APK.read_bytes(), "demo.apk")
    assert (await _application(builds))["platform"] == "android"

    r = await builds.request_link({"fileName": "setup.exe", "fileSize": 100})

    assert_problem(r, 422, "wrong_platform")


async def test_an_application_of_platform_other_takes_any_file(builds: Builds) -> None:
    r = await _verified(builds, b"MZ an installer", "setup.exe")
    assert r.status_code == 200, r.text
    assert r.json()["metadata"] is None
    assert r.json()["metadataError"].startswith("Not a readable .exe: not a Windows executable")
    r = await _verified(builds, b"the bytes of something", "notes.bin")
    assert r.status_code == 200, r.text
    assert (await _application(builds))["platform"] == "other"


async def test_a_desktop_application_refuses_a_phone_s_build(builds: Builds) -> None:
    await _platform(builds, "windows")

    r = await builds.request_link({"fileName": "Example.ipa", "fileSize": len(IPA)})

    problem = assert_problem(r, 422, "wrong_platform")
    assert problem["detail"] == (
        "This is a Windows application: it takes .msix, .msi, .exe, .appx, .msixbundle, "
        '.appxbundle or .zip files, and "Example.ipa" is not one'
    )


async def test_verify_keeps_an_ad_hoc_profile_s_udids_beside_the_build(
    builds: Builds, app: FastAPI
) -> None:
    udids = ["0123456789ABCDEF0123456789ABCDEF01234567", "00008030-001A35E22E88802E"]
    profile_bytes = profile(ProvisionedDevices=udids, Entitlements={"get-task-allow": False})
    data = ipa(extra={"embedded.mobileprovision": profile_bytes}).getvalue()

    r = await _verified(builds, data, "AdHoc.ipa")

    assert r.status_code == 200, r.text
    build = r.json()
    assert build["metadata"]["provisioning"]["type"] == "ad-hoc"
    async with app.state.ctx.sessions() as db:
        stored = await db.scalars(
            select(BuildProfileDevice.udid).where(BuildProfileDevice.build_id == build["buildId"])
        )
        assert sorted(stored) == sorted(udids)

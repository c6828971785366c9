"""Desktop builds through the real upload and verify API: each format made by its own tools
(tests/desktop/files.py) is read back; verify keeps the updaters' fields and the SHA-512; files of
another platform, and files that are not what their names say, are refused with a reason."""

from __future__ import annotations

import base64
import hashlib
import io
import zlib
from pathlib import Path
from typing import Any

import httpx
import pytest
from PIL import Image

from tests.builds.conftest import Builds
from tests.conftest import assert_problem
from tests.desktop import files

SIGNATURE = base64.b64encode(hashlib.sha512(b"signed").digest()).decode()  # as sign_update prints


async def _platform(builds: Builds, platform: str) -> None:
    r = await builds.client.put(
        f"/api/projects/{builds.project_id}/applications/{builds.app_id}",
        json={"platform": platform},
        headers=builds.owner.headers,
    )
    assert r.status_code == 200, r.text


async def _application(builds: Builds) -> dict[str, Any]:
    r = await builds.client.get(
        f"/api/projects/{builds.project_id}/applications/{builds.app_id}",
        headers=builds.owner.headers,
    )
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


async def _verify(builds: Builds, data: bytes, file_name: str, **fields: Any) -> httpx.Response:
    link = await builds.link(data, fileName=file_name)
    assert (await builds.put(link, data)).status_code == 200
    return await builds.verify(link["buildId"], **fields)


async def _ready(builds: Builds, data: bytes, file_name: str, **fields: Any) -> dict[str, Any]:
    """The build verified, with both digests (a desktop application's)."""
    desktop = (await _application(builds))["platform"] in ("macos", "windows", "linux")
    r = await _verify(builds, data, file_name, **fields)
    assert r.status_code == 200, r.text
    build: dict[str, Any] = r.json()
    assert build["status"] == "ready"
    assert build["metadataError"] is None
    assert build["sha256"] == hashlib.sha256(data).hexdigest()
    if desktop:
        assert build["sha512"] == base64.b64encode(hashlib.sha512(data).digest()).decode()
    else:
        assert build["sha512"] is None  # no desktop updater's feed serves it
    return build


# -- each format, read back ----------------------------------------------------------------------


@pytest.mark.parametrize("compression", ["xz", "gzip", "zstd", "none"])
async def test_a_deb_built_by_dpkg_deb_carries_its_control_fields(
    builds: Builds, tmp_path: Path, compression: str
) -> None:
    await _platform(builds, "linux")
    data = files.deb(tmp_path, compression=compression)

    build = await _ready(builds, data, "example-app_1.4.2-1_amd64.deb")

    assert build["metadata"] == {
        "package": "example-app",
        "shortVersion": "1.4.2-1",
        "arch": "amd64",
        "description": "An example desktop app",
    }
    assert build["architecture"] == "x64"
    assert build["sparkleEdSignature"] is None
    listed = await builds.client.get(builds.base, headers=builds.owner.headers)
    assert listed.json()["builds"][0]["sha512"] == build["sha512"]


async def test_an_rpm_built_by_rpmbuild_carries_its_header(builds: Builds, tmp_path: Path) -> None:
    await _platform(builds, "linux")
    data = files.rpm(tmp_path, version="2.0.1", release="7")

    build = await _ready(builds, data, "example-app-2.0.1-7.x86_64.rpm")

    assert build["metadata"] == {
        "package": "example-app",
        "shortVersion": "2.0.1",
        "buildNumber": "7",
        "arch": "x86_64",
        "description": "An example desktop app",
    }
    assert build["architecture"] == "x64"


async def test_an_msix_carries_its_identity_and_minimum_windows(builds: Builds) -> None:
    await _platform(builds, "windows")
    data = files.msix(architecture="arm64")

    build = await _ready(builds, data, "Example_1.4.2.0_arm64.msix")

    assert build["metadata"] == {
        "identityName": "Example.DesktopApp",
        "publisher": "CN=Example Corp, O=Example Corp, C=US",
        "shortVersion": "1.4.2.0",
        "arch": "arm64",
        "minOs": "10.0.17763.0",  # Windows.Desktop's, not Windows.Universal's
        "appName": "Example App",
    }
    assert build["architecture"] == "arm64"


async def test_a_zipped_app_carries_its_info_plist_architectures_and_icon(
    builds: Builds,
) -> None:
    await _platform(builds, "macos")
    data = files.app_zip()

    build = await _ready(builds, data, "Example-1.4.2-mac.zip", sparkleEdSignature=SIGNATURE)

    assert build["metadata"] == {
        "bundleId": "com.example.desktop",  # the app's, not its nested helper's
        "shortVersion": "1.4.2",
        "buildNumber": "812",
        "minOs": "11.0",
        "appName": "Example",
        "arch": "arm64 x86_64",
    }
    assert build["architecture"] == "universal"
    assert build["sparkleEdSignature"] == SIGNATURE
    assert (await _application(builds))["bundleId"] == "com.example.desktop"  # adopted
    icon = await builds.client.get(build["iconUrl"], headers=builds.owner.headers)
    assert icon.status_code == 200
    with Image.open(io.BytesIO(icon.content)) as image:
        assert image.format == "PNG"
        assert image.size == (512, 512)
        assert image.getpixel((256, 128)) == (30, 120, 200, 255)  # the icon's own pixels
        assert image.getpixel((256, 384)) == (255, 255, 255, 255)


async def test_a_zipped_app_of_one_architecture_says_which(builds: Builds) -> None:
    await _platform(builds, "macos")
    data = files.app_zip(executable=files.thin_executable(files.CPU_ARM64))

    build = await _ready(builds, data, "Example-arm64.zip")

    assert build["metadata"]["arch"] == "arm64"
    assert build["architecture"] == "arm64"


async def test_an_exe_carries_its_version_resource(builds: Builds, tmp_path: Path) -> None:
    await _platform(builds, "windows")
    data = files.exe(tmp_path)

    build = await _ready(builds, data, "Example Setup 1.4.2.exe")

    assert build["metadata"] == {
        "arch": "x64",
        "companyName": "Example Corp",
        "fileVersion": "1.4.2.812",
        "productVersion": "1.4.2",
        "shortVersion": "1.4.2",
        "appName": "Example App",
    }
    assert build["architecture"] == "x64"


async def test_an_exe_without_a_version_resource_takes_its_version_from_verify(
    builds: Builds, tmp_path: Path
) -> None:
    await _platform(builds, "windows")
    data = files.exe(tmp_path, with_version=False)

    build = await _ready(builds, data, "setup.exe", version="1.4.2", buildNumber="812")

    assert build["metadata"] == {
        "arch": "x64",
        "shortVersion": "1.4.2",
        "buildNumber": "812",
        "fromVerify": ["shortVersion", "buildNumber"],
    }


async def test_a_pkg_carries_its_distribution(builds: Builds) -> None:
    await _platform(builds, "macos")

    build = await _ready(builds, files.pkg(), "Example-1.4.2.pkg", buildNumber="812")

    assert build["metadata"] == {
        "packageId": "com.example.desktop.pkg",
        "shortVersion": "1.4.2",
        "minOs": "11.0",
        "appName": "Example App",
        "buildNumber": "812",
        "fromVerify": ["buildNumber"],
    }
    assert (await _application(builds))["bundleId"] is None  # a package's id is not the app's


async def test_a_dmg_takes_its_versions_and_the_updaters_fields_from_verify(
    builds: Builds,
) -> None:
    await _platform(builds, "macos")
    fields = {
        "version": "1.4.2",
        "buildNumber": "812",
        "minimumOsVersion": "11.0",
        "architecture": "universal",
        "sparkleEdSignature": SIGNATURE,
    }

    build = await _ready(builds, files.dmg(), "Example-1.4.2.dmg", **fields)

    assert build["metadata"] == {
        "shortVersion": "1.4.2",
        "buildNumber": "812",
        "minOs": "11.0",
        "fromVerify": ["shortVersion", "buildNumber", "minOs"],
    }
    assert build["architecture"] == "universal"
    assert build["sparkleEdSignature"] == SIGNATURE
    fetched = (await builds.get(build["buildId"])).json()
    assert {k: fetched[k] for k in ("metadata", "architecture", "sha512")} == {
        k: build[k] for k in ("metadata", "architecture", "sha512")
    }


async def test_a_dmg_without_fields_is_ready_without_metadata(builds: Builds) -> None:
    await _platform(builds, "macos")

    build = await _ready(builds, files.dmg(), "Example.dmg")

    assert build["metadata"] is None
    assert build["architecture"] is None


@pytest.mark.parametrize(
    ("platform", "file_name", "data", "architecture"),
    [
        ("windows", "Example-1.4.2.msi", files.msi(), None),
        ("linux", "Example-1.4.2.AppImage", files.appimage(0xB7), "arm64"),  # from its ELF header
        ("linux", "example-1.4.2.tar.gz", files.tar_gz(), None),
        ("windows", "Example-1.4.2-win.zip", files.zip_of({"Example/Example.exe": b"MZ"}), None),
    ],
)
async def test_a_file_whose_version_cannot_be_read_takes_it_from_verify(
    builds: Builds, platform: str, file_name: str, data: bytes, architecture: str | None
) -> None:
    await _platform(builds, platform)

    build = await _ready(builds, data, file_name, version="1.4.2")

    assert build["metadata"]["shortVersion"] == "1.4.2"
    assert build["metadata"]["fromVerify"] == ["shortVersion"]
    assert build["architecture"] == architecture


async def test_a_version_the_file_says_otherwise_is_refused(builds: Builds, tmp_path: Path) -> None:
    await _platform(builds, "linux")
    data = files.deb(tmp_path)

    link = await builds.link(data, fileName="example.deb")
    assert (await builds.put(link, data)).status_code == 200

    r = await builds.verify(link["buildId"], version="9.9")

    problem = assert_problem(r, 422, "metadata_mismatch")
    assert problem["errors"] == [
        {
            "field": "version",
            "message": "the file says '1.4.2-1'; send version only for a file that does not say "
            "it, or the same",
        }
    ]
    build = (await builds.get(link["buildId"])).json()
    assert (build["status"], build["failureCode"]) == ("pending", "metadata_mismatch")
    r = await builds.verify(link["buildId"], version="1.4.2-1")  # the same: taken
    assert r.status_code == 200, r.text
    assert "fromVerify" not in r.json()["metadata"]


async def test_an_architecture_the_file_says_otherwise_is_refused(
    builds: Builds, tmp_path: Path
) -> None:
    await _platform(builds, "linux")

    r = await _verify(builds, files.deb(tmp_path), "example.deb", architecture="arm64")

    problem = assert_problem(r, 422, "metadata_mismatch")
    assert problem["detail"] == "architecture: the file is built for x64 (amd64)"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("sparkleEdSignature", base64.b64encode(bytes(63)).decode()),  # 63 bytes, not 64
        ("sparkleEdSignature", "not base64 at all"),
        ("sparkleEdSignature", SIGNATURE.replace("=", "") + "!!"),
        ("architecture", "x86"),
        ("minimumOsVersion", "eleven"),
        ("version", "1.4 beta"),
        ("version", "1.4\u202e"),
        ("buildNumber", "x" * 101),
    ],
)
async def test_verify_refuses_updater_fields_that_are_not_what_they_say(
    builds: Builds, field: str, value: str
) -> None:
    await _platform(builds, "macos")

    r = await _verify(builds, files.dmg(), "Example.dmg", **{field: value})

    problem = assert_problem(r, 422, "validation_error")
    assert [e["field"] for e in problem["errors"]] == [field]


# -- the application's platform ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("platform", "file_name"),
    [
        ("linux", "setup.exe"),
        ("linux", "Example.dmg"),
        ("windows", "example.deb"),
        ("windows", "Example.pkg"),
        ("macos", "setup.msi"),
        ("macos", "example.rpm"),
        ("macos", "app-release.apk"),
    ],
)
async def test_a_desktop_application_refuses_another_platform_s_file_by_name(
    builds: Builds, platform: str, file_name: str
) -> None:
    await _platform(builds, platform)

    r = await builds.request_link({"fileName": file_name, "fileSize": 1000})

    problem = assert_problem(r, 422, "wrong_platform")
    assert f'"{file_name}" is not one' in problem["detail"]


async def test_a_windows_application_refuses_a_zip_of_a_mac_app(builds: Builds) -> None:
    await _platform(builds, "windows")

    r = await _verify(builds, files.app_zip(), "Example.zip")

    problem = assert_problem(r, 422, "wrong_platform")
    assert problem["detail"] == "This file is a macOS app, and this is a Windows application"


async def test_a_mac_application_refuses_a_zip_without_an_app(builds: Builds) -> None:
    await _platform(builds, "macos")

    r = await _verify(builds, files.msix(), "Example.zip")

    # An .msix is a zip: its entries say it is a Windows package.
    problem = assert_problem(r, 422, "wrong_platform")
    assert problem["detail"] == "This file is a Windows app, and this is a macOS application"
    r = await _verify(builds, files.zip_of({"README": b"hi"}), "notes.zip")
    problem = assert_problem(r, 422, "unreadable_build")
    assert problem["detail"] == (
        "Not a readable .zip: no <name>.app at the top of the archive; a macOS application "
        "takes a .zip of its .app"
    )


async def test_an_application_of_platform_other_becomes_macos_with_its_first_app(
    builds: Builds,
) -> None:
    build = await _ready(builds, files.app_zip(), "Example.zip")

    assert build["metadata"]["bundleId"] == "com.example.desktop"
    application = await _application(builds)
    assert (application["platform"], application["bundleId"]) == ("macos", "com.example.desktop")


# -- files that are not what they say, and hostile ones ------------------------------------------


@pytest.mark.parametrize(
    ("platform", "file_name", "data", "reason"),
    [
        (
            "linux",
            "x.deb",
            b"PK\x03\x04 not an ar",
            "not a Debian package (a .deb is an ar archive)",
        ),
        ("linux", "x.rpm", b"\x7fELF" + bytes(200), "not an RPM package (no RPM lead)"),
        ("linux", "x.AppImage", b"\x7fELF" + bytes(200), "not an AppImage"),
        ("linux", "x.tar.gz", b"just text", "not gzip-compressed"),
        ("windows", "x.exe", b"#!/bin/sh\necho hi\n", "not a Windows executable (no MZ header)"),
        ("windows", "x.msi", b"MZ" + bytes(100), "not a Windows Installer package"),
        (
            "windows",
            "x.msix",
            files.zip_of({"README": b"hi"}),
            "no AppxManifest.xml in the package",
        ),
        ("macos", "x.dmg", bytes(4096), "not a disk image (a .dmg ends with a koly trailer)"),
        ("macos", "x.pkg", b"PK\x03\x04", "not a xar archive"),
    ],
)
async def test_a_file_that_is_not_what_its_name_says_is_refused(
    builds: Builds, platform: str, file_name: str, data: bytes, reason: str
) -> None:
    await _platform(builds, platform)

    link = await builds.link(data, fileName=file_name)
    assert (await builds.put(link, data)).status_code == 200

    problem = assert_problem(await builds.verify(link["buildId"]), 422, "unreadable_build")

    assert reason in problem["detail"]
    assert problem["detail"].startswith(f"Not a readable .{file_name.rsplit('.', 1)[1].lower()}")
    build = (await builds.get(link["buildId"])).json()
    assert (build["status"], build["failureCode"]) == ("pending", "unreadable_build")
    assert build["metadataError"] == problem["detail"]


BILLION_LAUGHS = """<?xml version="1.0"?>
<!DOCTYPE Package [
  <!ENTITY a "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa">
  <!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">
  <!ENTITY c "&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;">
  <!ENTITY d "&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;">
  <!ENTITY e "&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;">
  <!ENTITY f "&e;&e;&e;&e;&e;&e;&e;&e;&e;&e;&e;&e;&e;&e;&e;&e;&e;&e;&e;&e;&e;&e;&e;&e;&e;&e;">
]>
<Package xmlns="http://schemas.microsoft.com/appx/manifest/foundation/windows10">
  <Identity Name="&f;" Publisher="CN=x" Version="1.0.0.0"/>
</Package>
"""
EXTERNAL_ENTITY = """<?xml version="1.0"?>
<!DOCTYPE Package [<!ENTITY secret SYSTEM "file:///etc/passwd">]>
<Package xmlns="http://schemas.microsoft.com/appx/manifest/foundation/windows10">
  <Identity Name="Example" Publisher="&secret;" Version="1.0.0.0"/>
</Package>
"""


@pytest.mark.parametrize("manifest", [BILLION_LAUGHS, EXTERNAL_ENTITY])
async def test_an_msix_whose_manifest_declares_entities_is_refused(
    builds: Builds, manifest: str
) -> None:
    await _platform(builds, "windows")

    r = await _verify(builds, files.msix(manifest), "Example.msix")

    problem = assert_problem(r, 422, "unreadable_build")
    assert problem["detail"].startswith(
        "Not a readable .msix: AppxManifest.xml declares a DTD or entities (DTDForbidden)"
    )
    assert "root:" not in problem["detail"]


async def test_a_deb_whose_control_file_is_huge_is_refused(builds: Builds, tmp_path: Path) -> None:
    await _platform(builds, "linux")
    description = "An example\n" + "\n".join(" " + "x" * 70 for _ in range(20_000))  # 1.4 MiB
    data = files.deb(tmp_path, description=description, compression="gzip")

    problem = assert_problem(await _verify(builds, data, "big.deb"), 422, "unreadable_build")

    assert problem["detail"] == (
        "Not a readable .deb: its control file is larger than 1048576 bytes; a Linux "
        "application takes only files that are what their names say"
    )


async def test_a_deb_whose_control_archive_inflates_without_end_is_refused(
    builds: Builds,
) -> None:
    """A gzip bomb for control.tar.gz: 64 MiB of zeros in 64 KiB."""
    await _platform(builds, "linux")
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    bomb = packer.compress(bytes(64 * files.MiB)) + packer.flush()
    data = files.ar([("debian-binary", b"2.0\n"), ("control.tar.gz", bomb)])

    problem = assert_problem(await _verify(builds, data, "bomb.deb"), 422, "unreadable_build")

    assert problem["detail"].startswith(
        "Not a readable .deb: control.tar.gz inflates to more than 16777216 bytes"
    )


@pytest.mark.parametrize("keep", [50, 150, 600, 2000, -100])
async def test_a_truncated_rpm_is_refused(builds: Builds, tmp_path: Path, keep: int) -> None:
    await _platform(builds, "linux")
    whole = files.rpm(tmp_path)
    data = whole[:keep]

    problem = assert_problem(await _verify(builds, data, "cut.rpm"), 422, "unreadable_build")

    assert problem["detail"].startswith("Not a readable .rpm: ")
    reasons = ("no RPM lead", "the file ends", "its header cannot be read")  # (the payload)
    assert any(reason in problem["detail"] for reason in reasons), problem["detail"]


async def test_an_rpm_that_claims_a_huge_header_is_refused_before_reading_it(
    builds: Builds, tmp_path: Path
) -> None:
    await _platform(builds, "linux")
    whole = bytearray(files.rpm(tmp_path))
    whole[96 + 8 : 96 + 16] = (50_000).to_bytes(4, "big") + (2**31 - 1).to_bytes(4, "big")

    r = await _verify(builds, bytes(whole), "huge.rpm")

    problem = assert_problem(r, 422, "unreadable_build")
    assert problem["detail"].startswith(
        "Not a readable .rpm: its signature header is larger than 1048576 bytes"
    )


async def test_a_zipped_app_whose_bundle_id_breaks_the_api_s_rules_is_refused(
    builds: Builds,
) -> None:
    await _platform(builds, "macos")
    info = {**files.APP_INFO, "CFBundleIdentifier": "com.example/../../etc"}

    r = await _verify(builds, files.app_zip(info), "Example.zip")

    problem = assert_problem(r, 422, "unreadable_build")
    assert problem["detail"].startswith(
        "This .zip cannot be taken: its bundle id (CFBundleIdentifier) is not a bundle id"
    )


async def test_a_deb_whose_version_holds_a_control_character_is_refused(
    builds: Builds, tmp_path: Path
) -> None:
    await _platform(builds, "linux")
    tar = files.tar_of({"./control": b"Package: x\nVersion: 1.0\x1b[2J\nArchitecture: all\n"})
    data = files.ar([("debian-binary", b"2.0\n"), ("control.tar", tar), ("data.tar", tar)])

    r = await _verify(builds, data, "x.deb")

    problem = assert_problem(r, 422, "unreadable_build")
    assert problem["detail"] == (
        "This .deb cannot be taken: its Version contains a control character (U+001B)"
    )


async def test_the_install_page_names_the_desktop_system_the_build_needs(builds: Builds) -> None:
    await _platform(builds, "macos")
    build = await _ready(builds, files.app_zip(), "Example.zip", installLink={})

    page = await builds.client.get(build["installUrl"])

    assert page.status_code == 200, page.text
    assert "macOS 11.0" in page.text
    assert "iOS 11.0" not in page.text

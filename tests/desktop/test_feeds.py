"""The desktop updaters' feeds against real uploaded builds: electron-updater's channel files
(read back as YAML), Sparkle's appcast and App Installer's file (read back by lxml and checked
against the names their documentation gives), caching, the update key's rules and the 404s
that say what is wrong."""

from __future__ import annotations

import base64
import hashlib
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
import yaml
from fastapi import FastAPI
from lxml import etree
from sqlalchemy import update

from buildbay.builds.models import BuildChannel
from buildbay.clock import FrozenClock
from buildbay.config import Settings
from buildbay.db.engine import finish
from buildbay.feeds.sparkle import GROUPS
from tests.builds.conftest import Builds
from tests.conftest import BASE_URL, assert_problem
from tests.desktop import files

SPARKLE = "http://www.andymatuschak.org/xml-namespaces/sparkle"
APPINSTALLER = "http://schemas.microsoft.com/appx/appinstaller/2018"
SIGNATURE = base64.b64encode(hashlib.sha512(b"signed").digest()).decode()  # 64 bytes
ARM64_ELF = 0xB7


@pytest.fixture
def settings(settings: Settings) -> Settings:
    settings.rate_limit_enabled = False
    return settings


# -- helpers ---------------------------------------------------------------------------------------


async def _platform(builds: Builds, platform: str) -> str:
    """The application made a `platform` one; its update key."""
    r = await builds.client.put(
        f"/api/projects/{builds.project_id}/applications/{builds.app_id}",
        json={"platform": platform},
        headers=builds.owner.headers,
    )
    assert r.status_code == 200, r.text
    key: str = r.json()["updateKey"]
    return key


async def _channel(builds: Builds, name: str) -> None:
    r = await builds.client.post(
        f"/api/projects/{builds.project_id}/applications/{builds.app_id}/channels",
        json={"name": name},
        headers=builds.owner.headers,
    )
    assert r.status_code == 201, r.text


async def _ready(builds: Builds, data: bytes, file_name: str, **fields: Any) -> dict[str, Any]:
    link = await builds.link(data, fileName=file_name)
    assert (await builds.put(link, data)).status_code == 200
    r = await builds.verify(link["buildId"], **fields)
    assert r.status_code == 200, r.text
    build: dict[str, Any] = r.json()
    assert build["status"] == "ready"
    return build


async def _rollout(app: FastAPI, build_id: str, percent: int) -> None:
    """The build's share of its channels (the API that sets it is staged rollout's)."""
    db = app.state.ctx.sessions()
    ok = False
    try:
        await db.execute(
            update(BuildChannel)
            .where(BuildChannel.build_id == build_id)
            .values(rollout_percent=percent)
        )
        ok = True
    finally:
        await finish(db, ok=ok)


def _sha512(data: bytes) -> str:
    return base64.b64encode(hashlib.sha512(data).digest()).decode()


def _download(key: str, build: dict[str, Any]) -> str:
    return f"{BASE_URL}/feeds/{key}/download/{build['buildId']}/{quote(build['fileName'])}"


async def _yaml(client: httpx.AsyncClient, key: str, name: str) -> dict[str, Any]:
    r = await client.get(f"/feeds/{key}/electron/{name}")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/yaml"
    body: dict[str, Any] = yaml.safe_load(r.text)
    return body


def _mac_zip(version: str, build_number: str, executable: bytes) -> bytes:
    info = {
        **files.APP_INFO,
        "CFBundleShortVersionString": version,
        "CFBundleVersion": build_number,
    }
    return files.app_zip(info, executable=executable)


# -- electron-updater ------------------------------------------------------------------------------


async def test_electron_latest_mac_lists_every_file_of_the_newest_version(
    builds: Builds,
) -> None:
    key = await _platform(builds, "macos")
    old = _mac_zip("1.4.2", "812", files.fat_executable(files.CPU_X86_64, files.CPU_ARM64))
    await _ready(builds, old, "Example-1.4.2-mac.zip", notes="the old one")
    x64 = _mac_zip("1.10.0", "900", files.thin_executable(files.CPU_X86_64))
    arm = _mac_zip("1.10.0", "900", files.thin_executable(files.CPU_ARM64))
    dmg = files.dmg()
    b_dmg = await _ready(builds, dmg, "Example-1.10.0.dmg", version="1.10.0", buildNumber="900")
    b_x64 = await _ready(builds, x64, "Example-1.10.0-mac.zip", notes="Fixes: <b>&amp;\nmore")
    b_arm = await _ready(builds, arm, "Example-1.10.0-arm64-mac.zip", notes="Fixes: <b>&amp;\nmore")

    body = await _yaml(builds.client, key, "latest-mac.yml")

    assert body["version"] == "1.10.0"  # a string, newer than 1.4.2 as a version
    # The .zips first (MacUpdater's, x64 before arm64: on Apple silicon it picks by `arm64` in
    # the address), then the .dmg.
    assert body["files"] == [
        {"url": _download(key, b_x64), "sha512": _sha512(x64), "size": len(x64)},
        {"url": _download(key, b_arm), "sha512": _sha512(arm), "size": len(arm)},
        {"url": _download(key, b_dmg), "sha512": _sha512(dmg), "size": len(dmg)},
    ]
    first = body["files"][0]
    assert body["path"] == first["url"]
    assert body["sha512"] == first["sha512"]
    assert body["releaseNotes"] == "Fixes: <b>&amp;\nmore"  # as written: YAML quotes it
    assert body["releaseDate"].endswith("Z")
    assert b_arm["verifiedAt"][:19] == body["releaseDate"][:19]
    assert "stagingPercentage" not in body


async def test_electron_linux_files_are_per_architecture(builds: Builds) -> None:
    key = await _platform(builds, "linux")
    x64 = files.appimage()
    arm = files.appimage(machine=ARM64_ELF, size=70 * 1024)
    b_x64 = await _ready(builds, x64, "Example-2.0.0.AppImage", version="2.0.0")
    b_arm = await _ready(builds, arm, "Example-2.0.0-arm64.AppImage", version="2.0.0")
    assert (b_x64["architecture"], b_arm["architecture"]) == ("x64", "arm64")

    body = await _yaml(builds.client, key, "latest-linux.yml")
    assert body["version"] == "2.0.0"
    assert [f["url"] for f in body["files"]] == [_download(key, b_x64)]
    body = await _yaml(builds.client, key, "latest-linux-arm64.yml")
    assert [f["url"] for f in body["files"]] == [_download(key, b_arm)]
    assert body["files"][0]["sha512"] == _sha512(arm)

    r = await builds.client.get(f"/feeds/{key}/electron/latest-linux-ia32.yml")
    assert_problem(r, 404, "unknown_architecture")
    assert "x64" in r.json()["detail"]
    for name in ("latest-mac.yml", "latest.yml"):
        r = await builds.client.get(f"/feeds/{key}/electron/{name}")
        assert_problem(r, 404, "wrong_feed")
        assert "latest-linux.yml" in r.json()["detail"]


async def test_electron_channels_and_staged_rollout(
    app: FastAPI, builds: Builds, tmp_path: Path
) -> None:
    key = await _platform(builds, "windows")
    await _channel(builds, "beta")
    stable = files.exe(tmp_path, product_version="1.4.2", file_version="1.4.2.1")
    b_stable = await _ready(builds, stable, "Example Setup 1.4.2.exe")
    beta = files.exe(tmp_path, product_version="1.5.0", file_version="1.5.0.1")
    b_beta = await _ready(
        builds, beta, "Example Setup 1.5.0.exe", channels=["beta"], notes="try it"
    )

    latest = await _yaml(builds.client, key, "latest.yml")  # `latest`: the default channel
    assert latest["version"] == "1.4.2"
    assert latest["path"] == _download(key, b_stable)
    assert "releaseNotes" not in latest
    body = await _yaml(builds.client, key, "beta.yml")
    assert body["version"] == "1.5.0"
    assert body["files"] == [
        {"url": _download(key, b_beta), "sha512": _sha512(beta), "size": len(beta)}
    ]
    assert body["releaseNotes"] == "try it"

    await _rollout(app, b_beta["buildId"], 25)
    assert (await _yaml(builds.client, key, "beta.yml"))["stagingPercentage"] == 25
    assert "stagingPercentage" not in await _yaml(builds.client, key, "latest.yml")

    r = await builds.client.get(f"/feeds/{key}/electron/nightly.yml")
    assert_problem(r, 404, "unknown_channel")
    assert '"nightly"' in r.json()["detail"]
    r = await builds.client.get(f"/feeds/{key}/electron/latest-mac.yml")
    assert_problem(r, 404, "wrong_feed")
    assert "latest.yml" in r.json()["detail"]


async def test_a_channel_without_a_build_for_the_updater_says_so(builds: Builds) -> None:
    key = await _platform(builds, "linux")
    await _channel(builds, "beta")
    await _ready(builds, files.appimage(), "Example.AppImage", version="1.0.0")
    r = await builds.client.get(f"/feeds/{key}/electron/beta-linux.yml")
    assert_problem(r, 404, "no_build")
    assert '"beta"' in r.json()["detail"]
    r = await builds.client.get(f"/feeds/{key}/electron/latest-linux-arm64.yml")
    assert_problem(r, 404, "no_build")
    assert "arm64" in r.json()["detail"]


# -- Sparkle ---------------------------------------------------------------------------------------


def _appcast(r: httpx.Response) -> etree._Element:
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/rss+xml"
    parser = etree.XMLParser(resolve_entities=False, no_network=True)
    root = etree.fromstring(r.content, parser)
    assert root.tag == "rss"
    assert root.get("version") == "2.0"
    assert root.nsmap.get("sparkle") == SPARKLE
    return root


def _s(name: str) -> str:
    return f"{{{SPARKLE}}}{name}"


def _text(item: etree._Element, name: str) -> str | None:
    found = item.find(name)
    return None if found is None else found.text


async def test_sparkle_appcast_items_carry_sparkle_s_elements(
    app: FastAPI, builds: Builds, clock: FrozenClock
) -> None:
    key = await _platform(builds, "macos")
    await _channel(builds, "beta")
    old = _mac_zip("1.4.2", "812", files.fat_executable(files.CPU_X86_64, files.CPU_ARM64))
    b_old = await _ready(builds, old, "Example-1.4.2.zip", sparkleEdSignature=SIGNATURE)
    clock.advance(hours=1)
    notes = 'Fixed <script>alert("x")</script> & more\n\nSecond paragraph\nline two'
    dmg = files.dmg()
    b_new = await _ready(
        builds, dmg, "Example-1.5.0.dmg", version="1.5.0", buildNumber="900",
        minimumOsVersion="12.0", sparkleEdSignature=SIGNATURE, mandatory=True, notes=notes,
        channels=["default", "beta"],
    )  # fmt: skip

    root = _appcast(await builds.client.get(f"/feeds/{key}/sparkle/default.xml"))
    channel = root.find("channel")
    assert channel is not None
    assert _text(channel, "title") is not None
    items = channel.findall("item")
    assert len(items) == 2
    new, older = items  # newest first
    assert _text(new, _s("version")) == "900"
    assert _text(new, _s("shortVersionString")) == "1.5.0"
    assert _text(new, _s("minimumSystemVersion")) == "12.0"
    assert new.find(_s("criticalUpdate")) is not None
    assert new.find(_s("channel")) is None  # the default channel's items have none
    assert new.find(_s("phasedRolloutInterval")) is None
    published = parsedate_to_datetime(_text(new, "pubDate") or "")
    assert published.isoformat().replace("+00:00", "Z") == b_new["verifiedAt"]
    description = _text(new, "description") or ""
    # Shown as written: the notes' markup is text in Sparkle's HTML view, never markup.
    assert "<script>" not in description
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; more" in description
    assert description.count("<p>") == 2
    assert "Second paragraph<br>line two" in description
    enclosure = new.find("enclosure")
    assert enclosure is not None
    assert enclosure.get("url") == _download(key, b_new)
    assert enclosure.get("length") == str(len(dmg))
    assert enclosure.get("type") == "application/octet-stream"
    assert enclosure.get(_s("edSignature")) == SIGNATURE

    assert _text(older, _s("version")) == "812"
    assert _text(older, _s("shortVersionString")) == "1.4.2"
    assert _text(older, _s("minimumSystemVersion")) == "11.0"  # LSMinimumSystemVersion
    assert older.find(_s("criticalUpdate")) is None
    assert older.find("description") is None
    older_enclosure = older.find("enclosure")
    assert older_enclosure is not None
    assert older_enclosure.get("url") == _download(key, b_old)

    root = _appcast(await builds.client.get(f"/feeds/{key}/sparkle/beta.xml"))
    (item,) = root.iterfind("channel/item")
    assert _text(item, _s("channel")) == "beta"
    assert _text(item, _s("shortVersionString")) == "1.5.0"

    r = await builds.client.get(f"/feeds/{key}/sparkle/nightly.xml")
    assert_problem(r, 404, "unknown_channel")


async def test_sparkle_phases_a_held_build_to_its_share_of_the_groups(
    app: FastAPI, builds: Builds, clock: FrozenClock
) -> None:
    key = await _platform(builds, "macos")
    build = await _ready(builds, files.dmg(), "Example-2.0.dmg", version="2.0", buildNumber="2")
    await _rollout(app, build["buildId"], 50)  # 3.5 sevenths: 4 groups
    for hours in (1, 30, 24 * 20):
        clock.advance(hours=hours)
        root = _appcast(await builds.client.get(f"/feeds/{key}/sparkle/default.xml"))
        (item,) = root.iterfind("channel/item")
        interval = int(_text(item, _s("phasedRolloutInterval")) or "0")
        published = parsedate_to_datetime(_text(item, "pubDate") or "")
        elapsed = (clock.now() - published).total_seconds()
        # Sparkle offers group g once pubDate + g * interval has passed: groups 0-3 now.
        offered = [g for g in range(GROUPS) if elapsed >= g * interval]
        assert offered == [0, 1, 2, 3]
    await _rollout(app, build["buildId"], 100)
    root = _appcast(await builds.client.get(f"/feeds/{key}/sparkle/default.xml"))
    assert root.find(f"channel/item/{_s('phasedRolloutInterval')}") is None


async def test_sparkle_lists_the_last_twenty_builds(builds: Builds) -> None:
    key = await _platform(builds, "macos")
    made = [
        await _ready(
            builds, files.dmg(4096 + n), f"E-{n}.dmg", version=f"1.{n}", buildNumber=str(n)
        )
        for n in range(21)
    ]
    root = _appcast(await builds.client.get(f"/feeds/{key}/sparkle/default.xml"))
    listed = [_text(item, _s("version")) for item in root.iterfind("channel/item")]
    assert listed == [str(n) for n in range(20, 0, -1)]
    assert (
        made[0]["buildId"]
        not in (await builds.client.get(f"/feeds/{key}/sparkle/default.xml")).text
    )


# -- App Installer ---------------------------------------------------------------------------------


def _appinstaller(r: httpx.Response) -> etree._Element:
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/appinstaller"
    root = etree.fromstring(r.content, etree.XMLParser(resolve_entities=False, no_network=True))
    assert root.tag == f"{{{APPINSTALLER}}}AppInstaller"
    return root


async def test_app_installer_names_the_newest_msix_with_its_identity(builds: Builds) -> None:
    key = await _platform(builds, "windows")
    await _ready(builds, files.msix(version="1.4.2.0"), "Example_1.4.2.0_x64.msix")
    newest = files.msix(version="1.10.0.0", architecture="arm64")
    b_new = await _ready(builds, newest, "Example_1.10.0.0_arm64.msix", mandatory=True)

    r = await builds.client.get(f"/feeds/{key}/appinstaller/default.appinstaller")
    root = _appinstaller(r)
    assert root.get("Uri") == f"{BASE_URL}/feeds/{key}/appinstaller/default.appinstaller"
    assert root.get("Version") == "1.10.0.0"
    children = [child.tag.split("}")[1] for child in root]
    assert children == ["MainPackage", "UpdateSettings"]
    package = root[0]
    assert dict(package.attrib) == {
        "Name": "Example.DesktopApp",
        "Publisher": "CN=Example Corp, O=Example Corp, C=US",
        "Version": "1.10.0.0",
        "ProcessorArchitecture": "arm64",
        "Uri": _download(key, b_new),
    }
    (on_launch,) = root[1]
    assert on_launch.tag == f"{{{APPINSTALLER}}}OnLaunch"
    assert dict(on_launch.attrib) == {
        "HoursBetweenUpdateChecks": "0",
        "ShowPrompt": "true",
        "UpdateBlocksActivation": "true",
    }

    r = await builds.client.get(f"/feeds/{key}/sparkle/default.xml")
    assert_problem(r, 404, "wrong_feed")
    assert "macOS" in r.json()["detail"]


async def test_app_installer_names_a_bundle_as_its_main_bundle(builds: Builds) -> None:
    key = await _platform(builds, "windows")
    await _ready(builds, files.msix(version="1.4.2.0"), "Example_1.4.2.0_x64.msix")
    bundle = await _ready(builds, files.msix_bundle("1.5.0.0"), "Example_1.5.0.0.msixbundle")

    r = await builds.client.get(f"/feeds/{key}/appinstaller/default.appinstaller")
    root = _appinstaller(r)
    assert root.get("Version") == "1.5.0.0"
    (main,) = root.findall(f"{{{APPINSTALLER}}}MainBundle")
    assert root.find(f"{{{APPINSTALLER}}}MainPackage") is None
    assert dict(main.attrib) == {  # a bundle has no one architecture
        "Name": "Example.DesktopApp",
        "Publisher": "CN=Example Corp, O=Example Corp, C=US",
        "Version": "1.5.0.0",
        "Uri": _download(key, bundle),
    }
    (on_launch,) = root.iterfind(f"{{{APPINSTALLER}}}UpdateSettings/{{{APPINSTALLER}}}OnLaunch")
    assert dict(on_launch.attrib) == {"HoursBetweenUpdateChecks": "0"}  # not mandatory


async def test_app_installer_needs_an_msix(builds: Builds, tmp_path: Path) -> None:
    key = await _platform(builds, "windows")
    await _ready(builds, files.exe(tmp_path), "setup.exe")
    r = await builds.client.get(f"/feeds/{key}/appinstaller/default.appinstaller")
    assert_problem(r, 404, "no_build")
    assert "MSIX" in r.json()["detail"]


# -- every feed ------------------------------------------------------------------------------------


async def test_every_feed_is_cacheable_and_revalidates(builds: Builds) -> None:
    key = await _platform(builds, "macos")
    await _ready(builds, _mac_zip("1.0.0", "1", files.thin_executable(files.CPU_ARM64)), "A.zip")
    for path in (f"/feeds/{key}/electron/latest-mac.yml", f"/feeds/{key}/sparkle/default.xml"):
        r = await builds.client.get(path)
        assert r.status_code == 200
        assert r.headers["cache-control"] == "public, max-age=60"
        etag = r.headers["etag"]
        again = await builds.client.get(path, headers={"If-None-Match": etag})
        assert again.status_code == 304
        assert again.content == b""
        assert again.headers["etag"] == etag
    before = (await builds.client.get(f"/feeds/{key}/sparkle/default.xml")).headers["etag"]
    await _ready(builds, _mac_zip("1.1.0", "2", files.thin_executable(files.CPU_ARM64)), "B.zip")
    r = await builds.client.get(
        f"/feeds/{key}/sparkle/default.xml", headers={"If-None-Match": before}
    )
    assert r.status_code == 200  # a new build: a new feed
    r = await builds.client.get(
        f"/feeds/{key}/electron/latest-mac.yml", headers={"If-None-Match": before}
    )
    assert r.status_code == 200
    assert yaml.safe_load(r.text)["version"] == "1.1.0"


async def test_unknown_keys_are_404s_that_say_so(builds: Builds) -> None:
    await _platform(builds, "macos")
    for key in ("bbu_nope", "nope", "bbu_" + "x" * 300):
        for path in (
            "electron/latest-mac.yml",
            "sparkle/default.xml",
            "appinstaller/d.appinstaller",
        ):
            r = await builds.client.get(f"/feeds/{key}/{path}")
            assert_problem(r, 404, "unknown_update_key")
            assert "update key" in r.json()["detail"]


async def test_a_phone_application_s_key_is_refused_clearly(builds: Builds) -> None:
    key = await _platform(builds, "android")
    for path in ("electron/latest.yml", "sparkle/default.xml", "appinstaller/default.appinstaller"):
        r = await builds.client.get(f"/feeds/{key}/{path}")
        assert_problem(r, 404, "not_a_desktop_application")
        assert "an Android application" in r.json()["detail"]
        assert "macOS, Windows and Linux" in r.json()["detail"]


async def test_a_rotated_key_serves_its_feed_for_seven_days(
    builds: Builds, clock: FrozenClock
) -> None:
    old = await _platform(builds, "linux")
    build = await _ready(builds, files.appimage(), "Example.AppImage", version="1.0.0")
    r = await builds.client.post(
        f"/api/projects/{builds.project_id}/applications/{builds.app_id}/update-key",
        headers=builds.owner.headers,
    )
    assert r.status_code == 200, r.text
    new = r.json()["updateKey"]
    for key in (old, new):
        body = await _yaml(builds.client, key, "latest-linux.yml")
        assert body["path"] == _download(key, build)  # under the key that listed it
    clock.advance(days=7, minutes=-1)
    await _yaml(builds.client, old, "latest-linux.yml")
    clock.advance(minutes=2)
    r = await builds.client.get(f"/feeds/{old}/electron/latest-linux.yml")
    assert_problem(r, 404, "unknown_update_key")
    await _yaml(builds.client, new, "latest-linux.yml")


async def test_a_deleted_build_drops_out_of_the_feeds(builds: Builds) -> None:
    key = await _platform(builds, "macos")
    kept = await _ready(builds, files.dmg(), "A-1.0.dmg", version="1.0", buildNumber="1")
    gone = await _ready(builds, files.dmg(5000), "A-2.0.dmg", version="2.0", buildNumber="2")
    assert (await _yaml(builds.client, key, "latest-mac.yml"))["version"] == "2.0"
    r = await builds.client.delete(f"{builds.base}/{gone['buildId']}", headers=builds.owner.headers)
    assert r.status_code == 204
    body = await _yaml(builds.client, key, "latest-mac.yml")
    assert body["version"] == "1.0"
    assert body["path"] == _download(key, kept)
    text = (await builds.client.get(f"/feeds/{key}/sparkle/default.xml")).text
    assert gone["buildId"] not in text
    assert kept["buildId"] in text


async def test_a_build_kept_to_a_group_is_in_no_feed_until_it_goes_to_everyone(
    builds: Builds,
) -> None:
    """The update check's rule (updates/published.py): the key ships in every copy, so a feed
    lists only what every tester may open."""
    key = await _platform(builds, "macos")
    project = f"/api/projects/{builds.project_id}"
    r = await builds.client.post(
        f"{project}/groups", json={"name": "QA"}, headers=builds.owner.headers
    )
    assert r.status_code == 201, r.text
    qa = r.json()["id"]
    r = await builds.client.put(
        f"{project}/applications/{builds.app_id}",
        json={"autoDistributeGroups": [qa]},
        headers=builds.owner.headers,
    )
    assert r.status_code == 200, r.text
    await _ready(builds, files.dmg(), "A-1.0.dmg", version="1.0", buildNumber="1")
    kept = await _ready(
        builds, files.dmg(5000), "A-2.0.dmg", version="2.0", buildNumber="2",
        channels=["default"],
    )  # fmt: skip
    r = await builds.client.get(f"/feeds/{key}/electron/latest-mac.yml")
    assert_problem(r, 404, "no_build")
    root = _appcast(await builds.client.get(f"/feeds/{key}/sparkle/default.xml"))
    assert root.findall("channel/item") == []

    r = await builds.client.post(
        f"{builds.base}/{kept['buildId']}/distribute",
        json={"groups": ["everyone"], "notify": False},
        headers=builds.owner.headers,
    )
    assert r.status_code == 200, r.text
    body = await _yaml(builds.client, key, "latest-mac.yml")
    assert body["version"] == "2.0"
    root = _appcast(await builds.client.get(f"/feeds/{key}/sparkle/default.xml"))
    assert [_text(i, _s("version")) for i in root.iterfind("channel/item")] == ["2"]

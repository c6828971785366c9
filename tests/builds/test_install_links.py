"""Install links: the public page (its QR code decoded back to the URL), the iOS manifest, the
download, expiry, revocation and who may do what."""

from __future__ import annotations

import plistlib
import re
from dataclasses import replace
from datetime import datetime
from html import unescape
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
import zxingcpp
from fastapi import FastAPI
from PIL import Image, ImageDraw
from sqlalchemy import update

from buildbay.applications.models import Application
from buildbay.builds.models import Build
from buildbay.clock import FrozenClock
from buildbay.config import Settings
from tests.builds.android_files import APK, aab, expected, proto_manifest
from tests.builds.conftest import Builds
from tests.builds.test_metadata import INFO, cgbi_png, ipa
from tests.conftest import BASE_URL, Account, assert_problem
from tests.console.test_mail_pages import sign_in
from tests.devices import ANDROID, DESKTOP, IPHONE
from tests.pools import Checkouts

HTML = {"Accept": "text/html,application/xhtml+xml"}
HTTPS = "https://testserver"  # iOS installs over the air only from an https:// public URL


@pytest.fixture
def public_url() -> str:
    """The server's public URL: plain http, as most tests run; https where a test says so."""
    return BASE_URL


@pytest.fixture
def settings(settings: Settings, public_url: str) -> Settings:
    settings.public_url = public_url
    return settings


async def _ready(builds: Builds, data: bytes, file_name: str, **verify: Any) -> dict[str, Any]:
    link = await builds.link(data, fileName=file_name)
    assert (await builds.put(link, data)).status_code == 200
    r = await builds.verify(link["buildId"], **verify)
    assert r.status_code == 200, r.text
    build: dict[str, Any] = r.json()
    return build


async def _install_link(
    builds: Builds, build_id: str, account: Account | None = None, **body: Any
) -> httpx.Response:
    return await builds.client.post(
        f"{builds.base}/{build_id}/install-link",
        json=body or None,
        headers=(account or builds.owner).headers,
    )


def _path(url: str) -> str:
    return urlsplit(url).path


def qr_text(page: str) -> str:
    """The page's inline SVG QR code, drawn as pixels and read by ZXing."""
    svg = re.search(r"<svg.*?</svg>", page, re.DOTALL)
    assert svg, "no QR code on the page"
    path = re.search(r' d="([^"]+)"', svg.group(0))
    assert path
    size = int(re.search(r'width="(\d+)"', svg.group(0)).group(1))  # type: ignore[union-attr]
    scale = int(re.search(r"scale\((\d+)\)", svg.group(0)).group(1))  # type: ignore[union-attr]
    image = Image.new("L", (size, size), 255)
    draw = ImageDraw.Draw(image)
    x = y = 0.0
    for command, numbers in re.findall(r"([MmHhVv])([-\d.\s]+)", path.group(1)):
        values = [float(n) for n in numbers.split()]
        if command in "Mm":
            x, y = (values[0], values[1]) if command == "M" else (x + values[0], y + values[1])
        elif command == "h":  # a run of dark modules on the row around y
            top = int(y - 0.5) * scale
            draw.rectangle([x * scale, top, (x + values[0]) * scale - 1, top + scale - 1], fill=0)
            x += values[0]
        else:
            raise AssertionError(f"unexpected path command {command}")
    results = zxingcpp.read_barcodes(image)
    assert len(results) == 1, "ZXing found no QR code"
    text: str = results[0].text
    return text


async def test_a_developer_shares_a_link_and_the_page_shows_the_build(
    builds: Builds, client: httpx.AsyncClient
) -> None:
    build = await _ready(builds, APK.read_bytes(), "demo.apk", notes="Fixes the <login> crash")
    developer = await builds.api.register("dev@example.com")
    await builds.api.add_member(builds.owner, builds.project_id, developer, "developer")

    r = await _install_link(builds, build["buildId"], developer)

    assert r.status_code == 201, r.text
    link = r.json()
    assert link["url"].startswith("http://")
    assert "/install/" in link["url"]
    assert link["manifestUrl"] is None  # not an .ipa
    assert link["createdBy"] == developer.user["id"]
    assert (link["shared"], link["owner"]) == (True, None)
    page = await client.get(_path(link["url"]), headers=HTML)  # no Authorization header
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert page.headers["cache-control"] == "no-store"
    text = unescape(page.text)
    assert expected()["appName"] in text
    assert "Version 1.4.2 (42)" in text
    assert f"{len(APK.read_bytes()) / 1024:.1f} KiB" in text
    assert "Fixes the <login> crash" in text  # shown, and escaped in the HTML
    assert "&lt;login&gt;" in page.text
    assert 'href="' + link["url"] + '/download"' in page.text
    assert "itms-services" not in page.text
    assert '<meta name="viewport"' in page.text
    assert qr_text(page.text) == link["url"]

    icon = await client.get(_path(link["url"]) + "/icon.png")
    assert icon.status_code == 200
    assert icon.content.startswith(b"\x89PNG")
    download = await client.get(_path(link["url"]) + "/download")
    assert download.status_code == 302
    file = await client.get(download.headers["location"])
    assert file.content == APK.read_bytes()


@pytest.mark.parametrize("public_url", [HTTPS])
async def test_the_install_page_offers_the_button_that_works_on_the_device(
    builds: Builds, client: httpx.AsyncClient
) -> None:
    android_build = await _ready(builds, APK.read_bytes(), "demo.apk")
    android_link = (await _install_link(builds, android_build["buildId"])).json()["url"]
    ios_app = await builds.api.application(builds.owner, builds.project_id, "Acme iOS",
                                           platform="ios")  # fmt: skip
    ios_builds = replace(builds, app_id=ios_app["id"])
    ios_build = await _ready(ios_builds, ipa().getvalue(), "Example.ipa")
    ios_link = (await _install_link(ios_builds, ios_build["buildId"])).json()["url"]

    async def shown(url: str, agent: str) -> str:
        page = await client.get(_path(url), headers=HTML | {"User-Agent": agent})
        assert page.status_code == 200
        assert page.headers["vary"] == "User-Agent"
        return unescape(page.text)

    on_iphone = await shown(ios_link, IPHONE)
    assert re.search(r'<a class="install" href="itms-services://[^"]+">Install</a>', on_iphone)
    assert "/download" not in on_iphone
    on_android = await shown(ios_link, ANDROID)
    assert "This is an iOS build." in on_android
    assert "not on this Android device" in on_android
    assert "itms-services" not in on_android
    assert 'class="install"' not in on_android
    on_desktop = await shown(ios_link, DESKTOP)
    assert "itms-services" in on_desktop
    assert "Open this page on the iPhone or iPad" in on_desktop

    apk_on_android = await shown(android_link, ANDROID)
    assert f'href="{android_link}/download"' in apk_on_android
    assert "Download demo.apk" in apk_on_android
    apk_on_iphone = await shown(android_link, IPHONE)
    assert "This is an Android build." in apk_on_iphone
    assert 'class="install"' not in apk_on_iphone


async def test_an_ipa_page_on_a_plain_http_server_turns_install_off_and_says_why(
    builds: Builds, client: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    ios_app = await builds.api.application(builds.owner, builds.project_id, "Acme iOS",
                                           platform="ios")  # fmt: skip
    ios_builds = replace(builds, app_id=ios_app["id"])
    ios_build = await _ready(ios_builds, ipa().getvalue(), "Example.ipa")
    link = (await _install_link(ios_builds, ios_build["buildId"])).json()
    token = _path(link["url"]).rsplit("/", 1)[-1]

    with caplog.at_level("WARNING", logger="buildbay.install"):
        page = await client.get(_path(link["url"]), headers=HTML | {"User-Agent": IPHONE})

    assert page.status_code == 200
    shown = unescape(page.text)
    assert "itms-services" not in shown
    assert re.search(r'<button class="install" type="button" disabled[^>]*>Install</button>', shown)
    assert "Installing is turned off on this server." in shown
    assert "iPhones and iPads install apps only from a secure (https://) address" in shown
    assert "BUILDBAY_PUBLIC_URL" not in shown  # the operator's detail is for the log
    [logged] = [r.getMessage() for r in caplog.records if r.name == "buildbay.install"]
    assert ios_build["buildId"] in logged
    assert BASE_URL in logged
    assert "BUILDBAY_PUBLIC_URL" in logged
    assert token not in logged
    # An Android build's page on the same server downloads as before.
    apk = await _ready(builds, APK.read_bytes(), "demo.apk")
    apk_link = (await _install_link(builds, apk["buildId"])).json()["url"]
    android = await client.get(_path(apk_link), headers=HTML | {"User-Agent": ANDROID})
    assert f'href="{apk_link}/download"' in android.text
    assert "Installing is turned off" not in android.text


async def test_the_default_expiry_is_a_week_and_can_be_chosen(
    builds: Builds, clock: FrozenClock
) -> None:
    build = await _ready(builds, APK.read_bytes(), "demo.apk")
    week = (await _install_link(builds, build["buildId"])).json()
    hours = (await _install_link(builds, build["buildId"], expiresInHours=3)).json()

    now = clock.now().timestamp()
    assert _seconds(week["expiresAt"]) - now == 7 * 24 * 3600
    assert _seconds(hours["expiresAt"]) - now == 3 * 3600
    for bad in (0, 24 * 90 + 1, "12"):
        r = await _install_link(builds, build["buildId"], expiresInHours=bad)
        assert_problem(r, 422, "validation_error")


def _seconds(timestamp: str) -> float:
    return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()


@pytest.mark.parametrize("public_url", [HTTPS])
async def test_an_ipa_link_offers_itms_services_and_a_valid_manifest(
    builds: Builds, client: httpx.AsyncClient
) -> None:
    icon, _ = cgbi_png(8, 8)
    data = ipa(extra={"AppIcon60x60@2x.png": icon}).getvalue()
    build = await _ready(builds, data, "Example.ipa")
    assert build["iconUrl"] is not None
    link = (await _install_link(builds, build["buildId"])).json()
    assert link["manifestUrl"] == link["url"] + "/manifest.plist"

    page = await client.get(_path(link["url"]), headers=HTML)
    itms = re.search(r'href="(itms-services://[^"]+)"', page.text)
    assert itms, page.text
    query = parse_qs(urlsplit(unescape(itms.group(1))).query)
    assert query["action"] == ["download-manifest"]
    assert query["url"] == [link["manifestUrl"]]

    r = await client.get(_path(link["manifestUrl"]))
    assert r.status_code == 200
    manifest = plistlib.loads(r.content)
    item = manifest["items"][0]
    assert item["metadata"] == {
        "bundle-identifier": INFO["CFBundleIdentifier"],
        "bundle-version": INFO["CFBundleShortVersionString"],
        "kind": "software",
        "title": INFO["CFBundleDisplayName"],
    }
    package = next(a for a in item["assets"] if a["kind"] == "software-package")
    assert (await client.get(package["url"])).content == data  # iOS sends no token either
    image = next(a for a in item["assets"] if a["kind"] == "display-image")
    assert (await client.get(image["url"])).headers["content-type"] == "image/png"


@pytest.mark.parametrize("served", ["", "/download", "/manifest.plist"])
async def test_what_an_install_link_serves_and_records_takes_one_connection(
    app: FastAPI, builds: Builds, client: httpx.AsyncClient, served: str
) -> None:
    """The page, the download and the manifest record an install event: they read the link in
    the unit of work that writes it, never holding a read connection beside it (two pooled
    connections at once, for a request anyone with the link can send)."""
    build = await _ready(builds, ipa().getvalue(), "Example.ipa")
    link = (await _install_link(builds, build["buildId"])).json()
    ctx = app.state.ctx
    with Checkouts(ctx.engine, ctx.read_engine) as checkouts:
        r = await client.get(_path(link["url"]) + served, headers=HTML)
    assert r.status_code in (200, 302), r.text
    assert (checkouts.most, checkouts.held) == (1, {})
    shown = (await builds.get(build["buildId"])).json()
    assert shown["downloadsCount"] == (0 if not served else 1)


async def test_an_android_link_has_no_ios_manifest(
    builds: Builds, client: httpx.AsyncClient
) -> None:
    build = await _ready(builds, APK.read_bytes(), "demo.apk")
    link = (await _install_link(builds, build["buildId"])).json()
    r = await client.get(_path(link["url"]) + "/manifest.plist")
    assert_problem(r, 404, "manifest_not_found")


async def test_an_expired_link_is_gone(
    builds: Builds, client: httpx.AsyncClient, clock: FrozenClock
) -> None:
    build = await _ready(builds, APK.read_bytes(), "demo.apk")
    link = (await _install_link(builds, build["buildId"], expiresInHours=1)).json()
    clock.advance(hours=1)

    assert_problem(await client.get(_path(link["url"])), 410, "install_link_expired")
    page = await client.get(_path(link["url"]), headers=HTML)
    assert page.status_code == 410
    assert page.headers["content-type"].startswith("text/html")
    assert "expired" in page.text
    for part in ("/download", "/manifest.plist", "/icon.png"):
        assert_problem(await client.get(_path(link["url"]) + part), 410, "install_link_expired")
    assert (await builds.get(build["buildId"])).json()["installUrl"] is None


async def test_a_revoked_link_is_gone_and_listed_as_revoked(
    builds: Builds, client: httpx.AsyncClient
) -> None:
    build = await _ready(builds, APK.read_bytes(), "demo.apk")
    link = (await _install_link(builds, build["buildId"])).json()
    assert (await builds.get(build["buildId"])).json()["installUrl"] == link["url"]

    r = await builds.client.delete(
        f"{builds.base}/{build['buildId']}/install-links/{link['linkId']}",
        headers=builds.owner.headers,
    )

    assert r.status_code == 204
    assert_problem(await client.get(_path(link["url"])), 410, "install_link_revoked")
    listed = await builds.client.get(
        f"{builds.base}/{build['buildId']}/install-links", headers=builds.owner.headers
    )
    assert [(x["linkId"], x["revokedAt"] is not None) for x in listed.json()["installLinks"]] == [
        (link["linkId"], True)
    ]
    assert (await builds.get(build["buildId"])).json()["installUrl"] is None


async def test_forged_and_unknown_tokens_are_404(builds: Builds, client: httpx.AsyncClient) -> None:
    build = await _ready(builds, APK.read_bytes(), "demo.apk")
    link = (await _install_link(builds, build["buildId"])).json()
    token = _path(link["url"]).rsplit("/", 1)[1]
    link_id, signature = token.split(".")
    forged = [
        f"{link_id}.{signature[:-1]}{'A' if signature[-1] != 'A' else 'B'}",
        f"inl_00000000000000000000000000.{signature}",
        link_id,
        "nothing",
    ]
    for bad in forged:
        assert_problem(await client.get(f"/install/{bad}"), 404, "install_link_not_found")
    page = await client.get(f"/install/{forged[0]}", headers=HTML)
    assert page.status_code == 404
    assert "not found" in page.text


async def test_the_link_of_a_deleted_build_is_gone(
    builds: Builds, client: httpx.AsyncClient
) -> None:
    build = await _ready(builds, APK.read_bytes(), "demo.apk")
    link = (await _install_link(builds, build["buildId"])).json()
    r = await builds.client.delete(
        f"{builds.base}/{build['buildId']}", headers=builds.owner.headers
    )
    assert r.status_code == 204
    assert_problem(await client.get(_path(link["url"])), 410, "install_link_gone")


async def test_verify_can_create_the_link_a_ci_job_prints(builds: Builds) -> None:
    link = await builds.link(APK.read_bytes(), fileName="demo.apk")
    await builds.put(link, APK.read_bytes())

    r = await builds.verify(link["buildId"], installLink={"expiresInHours": 48})

    assert r.status_code == 200, r.text
    build = r.json()
    assert "/install/" in build["installUrl"]
    assert build["downloadUrl"].endswith(f"/builds/{build['buildId']}/download")
    listed = await builds.client.get(builds.base, headers=builds.owner.headers)
    assert listed.json()["builds"][0]["installUrl"] == build["installUrl"]
    latest = await builds.client.get(f"{builds.base}/latest", headers=builds.owner.headers)
    assert latest.json()["installUrl"] == build["installUrl"]


async def test_a_pending_build_has_no_install_link(builds: Builds) -> None:
    link = await builds.link()
    assert_problem(await _install_link(builds, link["buildId"]), 409, "build_not_ready")


async def test_only_a_developer_creates_and_revokes_links(builds: Builds) -> None:
    build = await _ready(builds, APK.read_bytes(), "demo.apk")
    tester = await builds.api.register("tester@example.com")
    await builds.api.add_member(builds.owner, builds.project_id, tester, "tester")
    owners = (await _install_link(builds, build["buildId"])).json()
    links = f"{builds.base}/{build['buildId']}/install-links"

    assert_problem(await _install_link(builds, build["buildId"], tester), 403, "insufficient_role")
    r = await builds.client.delete(f"{links}/{owners['linkId']}", headers=tester.headers)
    assert_problem(r, 403, "insufficient_role")
    # A tester's list holds their own links only: a shared link is none of them.
    r = await builds.client.get(links, headers=tester.headers)
    assert r.status_code == 200, r.text
    assert r.json() == {"installLinks": []}
    r = await builds.client.delete(f"{links}/{owners['linkId']}", headers=builds.owner.headers)
    assert r.status_code == 204


async def test_a_retried_verify_reuses_the_live_link(builds: Builds) -> None:
    link = await builds.link(APK.read_bytes(), fileName="demo.apk")
    await builds.put(link, APK.read_bytes())
    first = (await builds.verify(link["buildId"], installLink={})).json()
    again = (await builds.verify(link["buildId"], installLink={})).json()

    assert again["installUrl"] == first["installUrl"]
    listed = await builds.client.get(
        f"{builds.base}/{link['buildId']}/install-links", headers=builds.owner.headers
    )
    assert len(listed.json()["installLinks"]) == 1


async def test_an_overlong_token_is_a_plain_not_found(client: httpx.AsyncClient) -> None:
    page = await client.get("/install/" + "x" * 500, headers=HTML)
    assert page.status_code == 404
    assert page.headers["content-type"].startswith("text/html")


async def test_an_app_bundle_page_says_it_is_not_installable_as_it_is(
    builds: Builds, client: httpx.AsyncClient
) -> None:
    build = await _ready(builds, aab(), "bundle.aab")
    link = (await _install_link(builds, build["buildId"])).json()
    page = await client.get(_path(link["url"]), headers=HTML)
    assert "Android App Bundle" in page.text
    assert "allow installs from your browser" not in page.text


# -- what the page may show and run --------------------------------------------------------------

BIDI = re.compile("[\u202a-\u202e\u2066-\u2069]")


async def test_the_install_page_has_its_security_headers_and_no_bidi_controls(
    app: FastAPI, builds: Builds, client: httpx.AsyncClient
) -> None:
    build = await _ready(builds, ipa().getvalue(), "Example.ipa", notes="Fixes \u202eevil")
    link = (await _install_link(builds, build["buildId"])).json()
    # As rows stored before the rules could hold them: names and metadata with bidi overrides.
    async with app.state.ctx.sessions() as db, db.begin():
        await db.execute(
            update(Build)
            .where(Build.id == build["buildId"])
            .values(
                metadata_={**build["metadata"], "appName": "Exa\u202emple", "minOs": "16\u20670"},
                file_name="Example\u202egnp.ipa",
            )
        )
        await db.execute(
            update(Application).where(Application.id == builds.app_id).values(name="A\u202eB")
        )

    for path in (_path(link["url"]), "/install/not-a-token"):  # the page, the error page
        page = await client.get(path, headers=HTML)
        assert page.headers["content-type"].startswith("text/html")
        assert "script-src 'self'" in page.headers["content-security-policy"]
        assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
        assert page.headers["x-frame-options"] == "DENY"
        assert page.headers["x-content-type-options"] == "nosniff"
        assert "<style" not in page.text
        assert "<script" not in page.text
    page = await client.get(_path(link["url"]), headers=HTML)
    assert page.status_code == 200
    assert "Example" in page.text
    assert "Exa" in page.text
    assert not BIDI.search(page.text), [m.group() for m in BIDI.finditer(page.text)]


async def test_a_removed_or_expired_builds_page_offers_the_newest_build_for_the_visitor(
    builds: Builds, app: FastAPI, clock: FrozenClock
) -> None:
    tester = await builds.api.register("tess@example.com")
    await builds.api.add_member(builds.owner, builds.project_id, tester, "tester")
    stranger = await builds.api.register("sam@example.com")

    async def version(name: str, code: int) -> dict[str, Any]:
        return await _ready(builds, aab(proto_manifest(version_name=name, version_code=code)),
                            f"acme-{name}.aab")  # fmt: skip

    old = await version("1.1.0", 110)
    old_link = (await _install_link(builds, old["buildId"], expiresInHours=48)).json()
    newest = await version("1.5.0", 150)
    newest_link = (await _install_link(builds, newest["buildId"], expiresInHours=1)).json()
    r = await builds.client.put(
        f"/api/projects/{builds.project_id}/applications/{builds.app_id}",
        json={"autoDistributeGroups": []},
        headers=builds.owner.headers,
    )
    assert r.status_code == 200, r.text
    await version("2.0.0", 200)  # given to nobody: not Tess's
    r = await builds.client.delete(f"{builds.base}/{old['buildId']}", headers=builds.owner.headers)
    assert r.status_code == 204

    async def page_for(account: Account | None, url: str) -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as browser:
            if account is not None:
                await sign_in(browser, account.email, account.password)
            return await browser.get(_path(url), headers=HTML)

    offered = await page_for(tester, old_link["url"])
    assert offered.status_code == 410
    shown = unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", offered.text)))
    assert "1.1.0 (110) was removed" in shown
    assert "The newest build for you is 1.5.0 (150)." in shown
    app_page = f"/projects/{builds.project_id}/apps/{builds.app_id}"
    assert f'href="{app_page}#build-{newest["buildId"]}"' in offered.text
    assert "2.0.0" not in shown
    # The API's answer stays the problem; someone outside the project, or not signed in, is
    # told nothing of the application's builds.
    assert_problem(await builds.client.get(_path(old_link["url"])), 410, "install_link_gone")
    for visitor in (stranger, None):
        plain = await page_for(visitor, old_link["url"])
        assert plain.status_code == 410
        assert "1.5.0" not in plain.text
        assert ("Sign in" in plain.text) is (visitor is None)

    clock.advance(hours=1)
    expired = await page_for(tester, newest_link["url"])
    assert expired.status_code == 410
    assert "This install link has expired" in expired.text
    assert "1.5.0 (150) is still yours" in expired.text

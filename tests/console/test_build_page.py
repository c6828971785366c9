"""A build's page and the application page's list of builds, through the app itself (no
browser; the browser scenarios are test_console_pages.py): what the file says, notes edited,
install links made with a lifetime and revoked, and the list searched, sorted and paged."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from buildbay.builds.service import human_size
from buildbay.console import builds as builds_page
from tests.builds.android_files import APK, APK_V1, expected
from tests.builds.test_metadata import INFO, ipa, profile
from tests.console.test_distribution_pages import browser, text
from tests.console.test_mail_pages import post, sign_in
from tests.desktop.files import msix
from tests.distribution.conftest import Team, settings, smtp, team

__all__ = ["browser", "settings", "smtp", "team"]


async def _apk(team: Team, notes: str | None = None) -> dict[str, Any]:
    return await team.api.upload(
        team.owner, team.project["id"], team.application["id"], APK.read_bytes(), "demo.apk", notes
    )


async def _ios(team: Team) -> dict[str, Any]:
    return await team.api.application(team.owner, team.project["id"], "Acme iOS",
                                      platform="ios")  # fmt: skip


async def _ipa(team: Team, app: dict[str, Any], short: str, number: str,
               notes: str | None = None, **extra: bytes) -> dict[str, Any]:  # fmt: skip
    info = INFO | {"CFBundleShortVersionString": short, "CFBundleVersion": number}
    data = ipa(info, extra=extra or None).getvalue()
    return await team.api.upload(
        team.owner, team.project["id"], app["id"], data, f"acme-{short}.ipa", notes
    )


def _page(team: Team, build: dict[str, Any], app_id: str | None = None) -> str:
    app = app_id or team.application["id"]
    return f"/projects/{team.project['id']}/apps/{app}/builds/{build['buildId']}"


async def test_the_page_says_what_the_apk_says_and_who_uploaded_it(
    team: Team, browser: httpx.AsyncClient
) -> None:
    build = await _apk(team, "First build")
    await sign_in(browser, team.owner.email)

    r = await browser.get(_page(team, build))

    assert r.status_code == 200, r.text
    shown = text(r)
    facts = expected()
    for label, value in [
        ("Package name", facts["packageName"]),
        ("Version", facts["versionName"]),
        ("Version code", str(facts["versionCode"])),
        ("Minimum Android API level", str(facts["minSdk"])),
        ("Target Android API level", str(facts["targetSdk"])),
        ("Signing certificate (SHA-256)", facts["certificate"]),
        ("Size", human_size(APK.stat().st_size)),
        ("SHA-256", build["sha256"]),
        ("Uploaded by", f"{team.owner.user['name']} <{team.owner.email}>"),
    ]:
        assert f"{label} {value}" in shown, label
    assert "First build" in r.text
    assert "No install links yet." in shown
    assert "Who installed it" in shown
    assert build["iconUrl"]  # demo.apk has a launcher icon
    icon = await browser.get(f"{_page(team, build)}/icon")
    assert (icon.status_code, icon.headers["content-type"]) == (200, "image/png")
    assert f'src="{_page(team, build)}/icon"' in r.text


async def test_the_page_of_an_ipa_shows_its_provisioning_profile(
    team: Team, browser: httpx.AsyncClient
) -> None:
    app = await _ios(team)
    mobileprovision = profile(
        ProvisionedDevices=["a", "b", "c"], Entitlements={"get-task-allow": False}
    )
    build = await _ipa(team, app, "2.4.0", "812", **{"embedded.mobileprovision": mobileprovision})
    await sign_in(browser, team.owner.email)

    shown = text(await browser.get(_page(team, build, app["id"])))

    for fact in ("Bundle id com.example.app", "Version 2.4.0", "Build number 812",
                 "Minimum iOS 16.0", "Provisioning profile ad-hoc",
                 "Profile expires 01 Mar 2027, 12:00", "Devices in the profile 3"):  # fmt: skip
        assert fact in shown, fact


async def test_the_page_of_a_desktop_build_shows_what_its_file_says(
    team: Team, browser: httpx.AsyncClient
) -> None:
    app = await team.api.application(team.owner, team.project["id"], "Acme for Windows",
                                      platform="windows")  # fmt: skip
    build = await team.api.upload(
        team.owner, team.project["id"], app["id"], msix(), "Acme-1.4.2.0.msix", None
    )
    await sign_in(browser, team.owner.email)

    shown = text(await browser.get(_page(team, build, app["id"])))

    for fact in ("App name Example App", "Version 1.4.2.0", "Identity name Example.DesktopApp",
                 "Publisher CN=Example Corp, O=Example Corp, C=US", "Architecture x64",
                 "Minimum OS version 10.0.17763.0"):  # fmt: skip
        assert fact in shown, fact
    assert "Minimum iOS" not in shown


async def test_notes_are_edited_and_too_long_notes_are_refused_beside_the_field(
    team: Team, browser: httpx.AsyncClient
) -> None:
    build = await _apk(team, "First build")
    await sign_in(browser, team.owner.email)
    page = _page(team, build)

    r = await post(browser, f"{page}/notes", {"notes": "Fixes the login\nand the crash"}, page=page)

    assert (r.status_code, r.headers["location"]) == (303, f"{page}#notes")
    assert "Notes saved." in text(await browser.get(r.headers["location"]))
    assert (await team.api.client.get(f"{team.builds}/{build['buildId']}",
                                      headers=team.owner.headers)).json()["notes"] == (
        "Fixes the login\nand the crash")  # fmt: skip
    r = await post(browser, f"{page}/notes", {"notes": "x" * 10_001}, page=page)
    assert r.status_code == 422
    assert "Notes are at most 10,000 characters." in text(r)
    assert 'aria-describedby="e-notes"' in r.text
    r = await post(browser, f"{page}/notes", {"notes": ""}, page=page)
    assert r.status_code == 303
    after = await team.api.client.get(f"{team.builds}/{build['buildId']}",
                                      headers=team.owner.headers)  # fmt: skip
    assert after.json()["notes"] is None


async def test_install_links_are_made_with_a_lifetime_copied_and_revoked(
    team: Team, browser: httpx.AsyncClient
) -> None:
    build = await _apk(team)
    await sign_in(browser, team.owner.email)
    page = _page(team, build)

    r = await post(browser, f"{page}/install-links", {"hours": "72"}, page=page)

    assert r.status_code == 303, r.text
    link_id = re.search(r"\?link=(inl_\w+)#install-links$", r.headers["location"])
    assert link_id, r.headers["location"]
    shown = await browser.get(r.headers["location"])
    row = re.search(rf'<tr id="link-{link_id.group(1)}" class="fresh">(.*?)</tr>', shown.text,
                    re.S)  # fmt: skip
    assert row, shown.text
    url = re.search(r'data-copy="([^"]+)"', row.group(1))
    assert url
    assert "live" in row.group(1)
    assert (await team.client.get(url.group(1))).status_code == 200
    links = await team.client.get(f"{team.builds}/{build['buildId']}/install-links",
                                  headers=team.owner.headers)  # fmt: skip
    made = links.json()["installLinks"][0]
    assert made["linkId"] == link_id.group(1)
    assert made["expiresAt"] > made["createdAt"]

    r = await post(browser, f"{page}/install-links", {"hours": "5"}, page=page)
    assert r.status_code == 422
    assert "Choose one of the lifetimes listed." in text(r)

    r = await post(browser, f"{page}/install-links/{link_id.group(1)}/revoke", {}, page=page)
    assert r.status_code == 303
    shown = await browser.get(r.headers["location"])
    assert "Install link revoked" in text(shown)
    assert "revoked" in text(shown)
    assert (await team.client.get(url.group(1))).status_code == 410


async def test_a_tester_gets_a_page_of_their_own_and_sees_icons(
    team: Team, browser: httpx.AsyncClient
) -> None:
    """The team's page is not a tester's: theirs has the build and its feedback form
    (tests/console/test_feedback_from_testers.py), no install links, notes to edit or
    distribution; a build not given to them is refused."""
    build = await _apk(team)
    app = await team.api.application(
        team.owner, team.project["id"], "Acme iOS", platform="ios", autoDistributeGroups=[]
    )
    hidden = await _ipa(team, app, "2.0", "20")  # given to nobody
    tess = await team.member("tess@example.com")
    await team.distribute(build["buildId"], groups=["everyone"], notify=False)
    await sign_in(browser, tess.email)

    own = await browser.get(_page(team, build))
    assert own.status_code == 200
    assert 'class="feedback"' in own.text
    for team_only in ("install-links", "/notes", "/distribute", "Who installed it"):
        assert team_only not in own.text
    assert (await browser.get(_page(team, hidden, app["id"]))).status_code == 403
    assert (await browser.get(f"{_page(team, build)}/icon")).status_code == 200
    app = await browser.get(_page(team, build).rsplit("/builds/", 1)[0])
    assert f'<img class="icon" src="{_page(team, build)}/icon"' in app.text


async def test_the_list_searches_sorts_and_pages(
    team: Team, browser: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(builds_page, "BUILDS_PER_PAGE", 2)
    app = await _ios(team)
    await _ipa(team, app, "1.0", "10", "Login screen")
    await _ipa(team, app, "3.0", "30", "Dark mode\n" + "details " * 40)
    await _ipa(team, app, "2.0", "20", "Crash fix for 100%_done")
    await sign_in(browser, team.owner.email)
    page = f"/projects/{team.project['id']}/apps/{app['id']}"

    def versions(r: httpx.Response) -> list[str]:
        assert r.status_code == 200, r.text
        table = r.text.split('<table class="builds', 1)[-1].split("</table>", 1)[0]
        return re.findall(r"/builds/bld_\w+\">([\d.]+ \(\d+\))</a>", table)

    first = await browser.get(page)
    assert versions(first) == ["2.0 (20)", "3.0 (30)"]  # newest first
    assert '<p class="clamp">Dark mode\ndetails ' in first.text  # two lines of it shown
    assert re.search(r'href="[^"]+/builds/bld_\w+#notes">All notes', first.text)
    nxt = re.search(r'href="([^"]+)" rel="next"', first.text)
    assert nxt
    second = await browser.get(nxt.group(1).replace("&amp;", "&"))
    assert versions(second) == ["1.0 (10)"]
    assert 'rel="next"' not in second.text
    assert "First page" in second.text

    assert versions(await browser.get(f"{page}?sort=version")) == ["3.0 (30)", "2.0 (20)"]
    by_version = await browser.get(f"{page}?q=1.0")
    assert versions(by_version) == ["1.0 (10)"]
    assert 'value="1.0"' in by_version.text
    assert versions(await browser.get(f"{page}?q=DARK")) == ["3.0 (30)"]
    assert versions(await browser.get(f"{page}?q=100%25_d")) == ["2.0 (20)"]  # % and _ as typed
    assert versions(await browser.get(f"{page}?q=acme-2")) == ["2.0 (20)"]  # the file name
    none = await browser.get(f"{page}?q=nothing+like+it")
    assert "No build matches “nothing like it”." in text(none)
    assert versions(await browser.get(f"{page}?q=DARK%00")) == ["3.0 (30)"]  # a NUL: dropped
    r = await browser.get(f"{page}?cursor=not-a-cursor")
    assert r.status_code == 422
    assert "a page of builds that the console did not give out" in text(r)


async def test_a_pending_build_says_why_it_is_not_ready(
    team: Team, browser: httpx.AsyncClient
) -> None:
    await _apk(team)  # the application is an Android one from then on
    api, owner = team.api, team.owner
    base = f"/api/app-distribution/{team.project['id']}/{team.application['id']}/builds"
    junk = b"release notes, not an app"
    links = []
    for name in ("waiting.apk", "refused.apk"):
        r = await api.client.post(
            f"{base}/upload-link", json={"fileName": name, "fileSize": len(junk)},
            headers=owner.headers,
        )  # fmt: skip
        assert r.status_code == 201, r.text
        links.append(r.json())
    r = await api.client.put(links[1]["uploadUrl"], content=junk, headers=links[1]["uploadHeaders"])
    assert r.status_code == 200, r.text
    r = await api.client.post(
        f"{base}/verify", json={"buildId": links[1]["buildId"]}, headers=owner.headers
    )
    assert r.status_code == 422, r.text
    await sign_in(browser, owner.email)

    listed = text(
        await browser.get(f"/projects/{team.project['id']}/apps/{team.application['id']}")
    )
    waiting = text(await browser.get(_page(team, links[0])))
    page = text(await browser.get(_page(team, links[1])))

    # The application's list shows ready builds; each pending one's page says why it waits.
    assert "Waiting for its file" not in listed
    assert "Waiting for its file: the upload link works until" in waiting
    refusal = "The last check refused it: Not a readable .apk: not a zip archive"
    assert refusal not in listed
    assert refusal in page


# -- install links follow membership (issue 34) ------------------------------------------------


async def test_a_tester_is_offered_no_sharing_and_the_server_refuses_it(
    team: Team, browser: httpx.AsyncClient
) -> None:
    build = await _apk(team)
    shared = await team.client.post(f"{team.builds}/{build['buildId']}/install-link",
                                    headers=team.owner.headers)  # fmt: skip
    assert shared.status_code == 201, shared.text
    other = await team.api.upload(  # another file (the same one is the same build)
        team.owner, team.project["id"], team.application["id"], APK_V1.read_bytes(), "demo.apk"
    )  # no shared link: the form would be offered to a developer
    tess = await team.member("tess@example.com")
    await sign_in(browser, tess.email)
    app = _page(team, build).rsplit("/builds/", 1)[0]

    page = await browser.get(app)

    assert page.status_code == 200, page.text
    assert f'id="build-{other["buildId"]}"' in page.text
    assert "Create install link" not in page.text
    assert "Copy install link" not in page.text
    assert shared.json()["url"] not in page.text
    for path, form in [(f"{_page(team, other)}/install-link", {}),
                       (f"{_page(team, other)}/install-links", {"hours": "72"}),
                       (f"{_page(team, build)}/install-links/{shared.json()['linkId']}/revoke",
                        {})]:  # fmt: skip
        r = await post(browser, path, form, page=app)
        assert r.status_code == 403, (path, r.text)
        assert "This needs the developer role or higher; you are tester" in text(r)
    listed = await team.client.get(f"{team.builds}/{other['buildId']}/install-links",
                                   headers=team.owner.headers)  # fmt: skip
    assert listed.json() == {"installLinks": []}
    listed = await team.client.get(f"{team.builds}/{build['buildId']}/install-links",
                                   headers=team.owner.headers)  # fmt: skip
    assert [link["revokedAt"] for link in listed.json()["installLinks"]] == [None]

    # A developer is offered both.
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=team.app),
                                 base_url=str(browser.base_url)) as developer:  # fmt: skip
        await sign_in(developer, team.owner.email)
        page = await developer.get(app)
    assert "Create install link" in page.text
    assert "Copy install link" in page.text


async def test_a_tester_installs_through_a_link_of_their_own_that_ends_with_their_access(
    team: Team, browser: httpx.AsyncClient
) -> None:
    app = await _ios(team)
    build = await _ipa(team, app, "1.0", "10")
    tess = await team.member("tess@example.com")
    await sign_in(browser, tess.email)
    page = _page(team, build, app["id"])

    r = await post(browser, f"{page}/install", {}, page=page.rsplit("/builds/", 1)[0])

    assert r.status_code == 303, r.text
    url = r.headers["location"]
    assert "/install/" in url
    opened = await browser.get(url, headers={"Accept": "text/html"})
    assert opened.status_code == 200, opened.text
    builds = f"/api/app-distribution/{team.project['id']}/{app['id']}/builds/{build['buildId']}"
    listed = await team.client.get(f"{builds}/install-links", headers=team.owner.headers)
    [link] = listed.json()["installLinks"]
    assert link["url"] == url
    assert link["shared"] is False
    assert link["owner"] == {"userId": tess.user["id"], "email": tess.email,
                             "name": tess.user["name"]}  # fmt: skip
    # Nobody else's: the build has still no shared link.
    assert (await team.client.get(builds, headers=team.owner.headers)).json()["installUrl"] is None

    r = await team.client.delete(
        f"/api/projects/{team.project['id']}/members/{tess.user['id']}", headers=team.owner.headers
    )
    assert r.status_code == 204, r.text
    gone = await team.client.get(url)
    assert (gone.status_code, gone.json()["code"]) == (410, "install_link_revoked")


async def test_the_build_page_says_whose_each_link_is(
    team: Team, browser: httpx.AsyncClient
) -> None:
    tess = await team.member("tess@example.com")
    build = await _apk(team)
    await team.run_jobs()  # Tess's mail, with her own link
    r = await team.client.post(f"{team.builds}/{build['buildId']}/install-link",
                               headers=team.owner.headers)  # fmt: skip
    assert r.status_code == 201, r.text
    await sign_in(browser, team.owner.email)

    shown = text(await browser.get(_page(team, build)))

    name = tess.user["name"] or tess.email
    assert f"{name} <{tess.email}> (personal)" in shown
    assert f"Shared, made by {team.owner.user['name'] or team.owner.email}" in shown


async def test_the_rollout_form_saves_per_channel_and_refuses_what_the_api_refuses(
    team: Team, browser: httpx.AsyncClient
) -> None:
    build = await _apk(team)
    await sign_in(browser, team.owner.email)
    page = _page(team, build)

    r = await post(browser, f"{page}/rollout", {"channel": "default", "percent": "35"}, page)
    assert r.status_code == 303, r.text
    assert r.headers["location"] == f"{page}#updates"
    shown = text(await browser.get(page))
    assert "Update checks on default now offer this build to 35% of its installs." in shown
    assert "Lowered the rollout on default from 100% to 35%" in shown
    api = await team.api.client.get(
        f"/api/app-distribution/{team.project['id']}/{team.application['id']}/builds/"
        f"{build['buildId']}",
        headers=team.owner.headers,
    )
    assert api.json()["rolloutPercents"] == {"default": 35}

    for wrong in ("0", "101", "", "12.5", "ten"):
        r = await post(browser, f"{page}/rollout", {"channel": "default", "percent": wrong}, page)
        assert r.status_code == 422, wrong
        assert "Choose a rollout from 1 to 100 percent of the channel's installs." in text(r)
    # A channel the build is not on (or none at all): nothing to roll out there.
    r = await post(browser, f"{page}/rollout", {"channel": "beta", "percent": "50"}, page)
    assert r.status_code == 404
    assert "The build is not published to beta" in text(r)
    # Nor a name no channel may have (a NUL, which PostgreSQL refuses in text).
    r = await post(browser, f"{page}/rollout", {"channel": "be\x00ta", "percent": "50"}, page)
    assert r.status_code == 404
    r = await post(browser, f"{page}/release", {"channel": "be\x00ta"}, page)
    assert r.status_code == 422
    assert "no channel named" in text(r)
    assert "35%" in text(await browser.get(page))

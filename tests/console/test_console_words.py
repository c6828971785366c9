"""How the console says things, through the app itself (no browser; the browser's side is
test_console_in_the_browser_words.py): roles and platforms in words, counts with their noun in
the right number, refusals without the API's field names, times written in UTC and said so,
the upload's file picker offering the platform's files, and a downloads chart with nothing to
draw saying so."""

from __future__ import annotations

import re

import httpx

from tests.builds.android_files import APK
from tests.console.test_distribution_pages import browser, text
from tests.console.test_mail_pages import post, sign_in
from tests.distribution.conftest import Team, settings, smtp, team

__all__ = ["browser", "settings", "smtp", "team"]


def _app_path(team: Team, app_id: str | None = None) -> str:
    return f"/projects/{team.project['id']}/apps/{app_id or team.application['id']}"


async def test_roles_and_platforms_read_as_words(team: Team, browser: httpx.AsyncClient) -> None:
    await team.api.application(team.owner, team.project["id"], "Acme iOS", platform="ios")
    android = await team.api.application(team.owner, team.project["id"], "Acme", platform="android")
    await team.member("dev@example.com", "developer")
    await sign_in(browser, team.owner.email)

    project = await browser.get(f"/projects/{team.project['id']}")
    shown = text(project)
    assert "Your role: Owner" in shown
    assert re.search(r'data-label="Platform">iOS</td>', project.text)
    assert re.search(r'data-label="Platform">Android</td>', project.text)
    assert '<option value="developer" selected>Developer</option>' in project.text
    assert '<option value="ios">iOS</option>' in project.text
    assert ">developer<" not in project.text
    assert ">ios<" not in project.text
    app = text(await browser.get(_app_path(team, android["id"])))
    assert "Android · your role: Owner" in app
    projects = await browser.get("/projects")
    assert re.search(r'data-label="Your role">Owner</td>', projects.text)


async def test_counts_say_their_noun_in_the_right_number(
    team: Team, browser: httpx.AsyncClient
) -> None:
    await team.member("tess@example.com")
    await sign_in(browser, team.owner.email)
    groups = f"/projects/{team.project['id']}/groups"
    r = await post(browser, groups, {"name": "QA"}, page=groups)
    assert r.status_code == 303
    group_id = r.headers["location"].rsplit("#", 1)[1]

    r = await post(browser, f"{groups}/{group_id}/testers", {"emails": "tess@example.com"},
                   page=groups)  # fmt: skip
    assert r.status_code == 303
    page = await browser.get(r.headers["location"])
    assert "1 tester in the group." in text(page)
    assert "QA (1 tester)" in text(page)
    settings = await browser.get(f"{_app_path(team)}/settings")
    assert re.search(r"> QA \(1 tester\)</label>", settings.text)
    assert re.search(r"> \w+ \(2 testers\)</label>", settings.text)  # the built-in group


async def test_a_refusal_reads_as_a_sentence_without_the_apis_field_names(
    team: Team, browser: httpx.AsyncClient
) -> None:
    build = await team.upload()
    await sign_in(browser, team.owner.email)
    app = _app_path(team)

    r = await post(browser, f"{app}/builds/{build['buildId']}/release", {"channel": "nope"}, app)

    assert r.status_code == 422
    assert "The application has no channel named nope; create it first." in text(r)
    assert "channels:" not in r.text


async def test_times_are_written_in_utc_and_said_so_for_the_browser_to_rewrite(
    team: Team, browser: httpx.AsyncClient
) -> None:
    await sign_in(browser, team.owner.email)

    r = await browser.get("/projects")

    written = re.search(r'<time datetime="([^"]+)">([^<]+)</time>', r.text)
    assert written, r.text
    assert written.group(1).endswith("Z")
    assert written.group(2).endswith(" UTC")
    assert '<script src="/static/times.js" defer></script>' in r.text
    script = await browser.get("/static/times.js")
    assert script.status_code == 200
    assert "time[datetime]" in script.text


async def test_the_upload_form_offers_the_platforms_file_types(
    team: Team, browser: httpx.AsyncClient
) -> None:
    ios = await team.api.application(team.owner, team.project["id"], "Acme iOS", platform="ios")
    android = await team.api.application(team.owner, team.project["id"], "Acme", platform="android")
    await sign_in(browser, team.owner.email)

    def picker(page: httpx.Response) -> str:
        found = re.search(r'<input id="f-file" name="file" type="file"[^>]*>', page.text)
        assert found, page.text
        return found.group(0)

    page = await browser.get(_app_path(team, android["id"]))
    assert 'accept=".apk,.aab"' in picker(page)
    assert ".apk, .aab for Android: choose it" in text(page)
    assert 'accept=".ipa"' in picker(await browser.get(_app_path(team, ios["id"])))
    assert team.application["platform"] == "other"  # any file
    assert "accept=" not in picker(await browser.get(_app_path(team)))


async def test_an_empty_downloads_chart_says_no_downloads_yet(
    team: Team, browser: httpx.AsyncClient
) -> None:
    build = await team.upload(data=APK.read_bytes(), file_name="demo.apk")
    await sign_in(browser, team.owner.email)
    app = _app_path(team)

    empty = await browser.get(app)

    section = empty.text.split('<h2 id="downloads">', 1)[1].split("</section>", 1)[0]
    assert "No downloads yet." in section
    assert "<svg" not in section
    download = await browser.get(f"{app}/builds/{build['buildId']}/download")
    assert download.status_code == 302
    drawn = await browser.get(app)
    section = drawn.text.split('<h2 id="downloads">', 1)[1].split("</section>", 1)[0]
    assert '<svg class="chart"' in section
    assert "1 in all" in section
    assert "No downloads yet" not in section

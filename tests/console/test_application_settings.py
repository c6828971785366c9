"""An application's settings page through the app itself (no browser; the browser scenario is
test_console_pages.py): rename, platform, bundle id cleared, retention, refusals as sentences
beside their fields, delete only with the name typed, and who may."""

from __future__ import annotations

import httpx

from tests.console.test_distribution_pages import browser, text
from tests.console.test_mail_pages import post, sign_in
from tests.distribution.conftest import Team, settings, smtp, team

__all__ = ["browser", "settings", "smtp", "team"]


def _form(**changes: str) -> dict[str, str]:
    return {"name": "Acme Android", "platform": "android", "bundleId": "com.acme.app",
            "keepLast": "", "keepDays": "", "protectGroups": "on",
            "protectChannels": "on"} | changes  # fmt: skip


PROTECTED = {"groups": True, "channels": True}


async def _application(team: Team) -> dict[str, object]:
    r = await team.client.get(
        f"/api/projects/{team.project['id']}/applications/{team.application['id']}",
        headers=team.owner.headers,
    )
    assert r.status_code == 200, r.text
    body: dict[str, object] = r.json()
    return body


async def test_an_admin_renames_sets_retention_and_clears_the_bundle_id(
    team: Team, browser: httpx.AsyncClient
) -> None:
    await sign_in(browser, team.owner.email)
    page = f"/projects/{team.project['id']}/apps/{team.application['id']}/settings"

    r = await post(browser, page, _form(name="Acme Beta", keepLast="5", keepDays="30"))

    assert (r.status_code, r.headers["location"]) == (303, page)
    shown = await browser.get(r.headers["location"])
    assert "Settings saved." in text(shown)
    assert 'value="Acme Beta"' in shown.text
    app = await _application(team)
    assert (app["name"], app["platform"], app["bundleId"]) == ("Acme Beta", "android",
                                                                "com.acme.app")  # fmt: skip
    assert app["retention"] == {"keepLast": 5, "keepDays": 30, "protect": PROTECTED}

    r = await post(browser, page, _form(name="Acme Beta", bundleId=" ", platform="ios"))
    assert r.status_code == 303, r.text
    app = await _application(team)
    assert (app["platform"], app["bundleId"]) == ("ios", None)
    assert app["retention"] == {"keepLast": None, "keepDays": None, "protect": PROTECTED}


async def test_refused_fields_are_sentences_beside_them_and_nothing_changes(
    team: Team, browser: httpx.AsyncClient
) -> None:
    await team.api.application(team.owner, team.project["id"], "Acme iOS")
    await sign_in(browser, team.owner.email)
    page = f"/projects/{team.project['id']}/apps/{team.application['id']}/settings"
    before = await _application(team)

    r = await post(browser, page, _form(bundleId="com acme", keepLast="0", keepDays="soon"))

    assert r.status_code == 422
    shown = text(r)
    assert "Enter a bundle id such as com.acme.app" in shown
    assert "Enter a number of builds from 1 to 100,000, or leave it empty." in shown
    assert "Enter a number of days from 1 to 36,500, or leave it empty." in shown
    assert 'value="com acme"' in r.text  # the field keeps what was typed
    assert 'id="e-bundleId"' in r.text
    r = await post(browser, page, _form(name="  "))
    assert r.status_code == 422
    assert "The name cannot be blank." in text(r)
    r = await post(browser, page, _form(name="acme ios"))
    assert r.status_code == 409
    assert "The project already has an application named acme ios." in text(r)
    assert await _application(team) == before


async def test_delete_needs_the_name_typed(team: Team, browser: httpx.AsyncClient) -> None:
    await sign_in(browser, team.owner.email)
    app = f"/projects/{team.project['id']}/apps/{team.application['id']}"

    r = await post(browser, f"{app}/delete", {"confirm": "Acme"}, page=f"{app}/settings")

    assert r.status_code == 422
    assert "Type the application's name exactly to delete it." in text(r)
    assert (await browser.get(app)).status_code == 200
    r = await post(browser, f"{app}/delete", {"confirm": "Acme Android"}, page=f"{app}/settings")
    assert (r.status_code, r.headers["location"]) == (303, f"/projects/{team.project['id']}")
    assert "Deleted Acme Android and its builds." in text(await browser.get(r.headers["location"]))
    assert (await browser.get(app)).status_code == 404


async def test_a_developer_sees_no_settings(team: Team, browser: httpx.AsyncClient) -> None:
    dev = await team.member("dev@example.com", "developer")
    await sign_in(browser, dev.email)
    app = f"/projects/{team.project['id']}/apps/{team.application['id']}"

    assert f'href="{app}/settings"' not in (await browser.get(app)).text
    r = await browser.get(f"{app}/settings")
    assert r.status_code == 403
    assert r.headers["content-type"].startswith("text/html")
    browser.cookies.clear()
    await sign_in(browser, team.owner.email)
    assert f'href="{app}/settings"' in (await browser.get(app)).text


async def test_a_rename_says_which_ci_jobs_break_and_the_page_gives_the_id_to_use(
    team: Team, browser: httpx.AsyncClient
) -> None:
    await sign_in(browser, team.owner.email)
    app_id = team.application["id"]
    app = f"/projects/{team.project['id']}/apps/{app_id}"
    command = f"buildbay upload FILE --app-id {app_id}"

    renamed = await post(browser, f"{app}/settings", _form(name="Acme <Beta>"))
    shown = await browser.get(renamed.headers["location"])
    recased = await post(browser, f"{app}/settings", _form(name="ACME <BETA>"))
    quiet = await browser.get(recased.headers["location"])
    page = await browser.get(app)

    assert renamed.status_code == 303, renamed.text
    assert (
        "Settings saved. Renamed from Acme Android to Acme <Beta>: CI jobs that name the "
        'application by name (buildbay upload --app "Acme Android") must change. Its id never '
        f"changes: name it by --app-id {app_id} instead."
    ) in text(shown)
    assert "Acme <Beta>" not in shown.text  # escaped: the name is the user's text
    assert f"its id, {app_id}, never changes" in text(shown)  # beside the name field
    # A change of case breaks no CI job (the CLI finds a name in any case): nothing to warn of.
    assert '<p class="notice" role="status">Settings saved.</p>' in quiet.text
    assert "Upload from CI" in text(page)
    assert f'data-copy="{command}"' in page.text
    assert "--project" not in page.text  # never the names, which change
    tester = await team.member("tess@example.com", "tester")
    browser.cookies.clear()
    await sign_in(browser, tester.email)
    assert "Upload from CI" not in text(await browser.get(app))

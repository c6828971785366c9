"""What testers count: an application's `buildsCount` and a channel's `buildsCount` and
`latestBuildId` are of the builds the caller can see (a tester: those distributed to them;
developers and above: all), in the API and on the console's pages, and a tester's page of
applications is still one statement."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from html import unescape
from typing import Any

import httpx

from tests.conftest import BASE_URL, Account, statements_run
from tests.distribution.conftest import Team

ORIGIN = {"Origin": BASE_URL}


@asynccontextmanager
async def console_of(team: Team, account: Account) -> AsyncIterator[httpx.AsyncClient]:
    """A browser-like client (cookies, https to the app in process) signed in as `account`."""
    transport = httpx.ASGITransport(app=team.app)
    base = BASE_URL.replace("http://", "https://")
    async with httpx.AsyncClient(transport=transport, base_url=base) as client:
        page = await client.get("/login")
        found = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert found, page.text[:300]
        r = await client.post("/login", headers=ORIGIN, data={
            "csrf": found.group(1), "email": account.email, "password": account.password,
        })  # fmt: skip
        assert r.status_code == 303, r.text
        yield client


def _cells(html: str, label: str) -> list[str]:
    """The text of every table cell of this data-label, in order."""
    found = re.findall(rf'<td data-label="{label}">(.*?)</td>', html, re.S)
    return [unescape(re.sub(r"<[^>]+>", "", cell)).strip() for cell in found]


async def _builds(team: Team) -> dict[str, Any]:
    """QA-only (on default, released there by hand), everyone's, and Tom's by e-mail (on
    default by hand), in this order; the members who see them: Tess in QA, Tom, Tina in no
    group, and a developer."""
    tess = await team.member("tess@example.com")
    tom = await team.member("tom@example.com")
    tina = await team.member("tina@example.com")
    dev = await team.member("dev@example.com", "developer")
    qa = await team.group("QA", tess.email)
    app_path = f"/api/projects/{team.project['id']}/applications/{team.application['id']}"
    r = await team.client.put(
        app_path, json={"autoDistributeGroups": []}, headers=team.owner.headers
    )
    assert r.status_code == 200, r.text
    qa_only = await team.upload()
    everyone = await team.upload()
    toms = await team.upload()
    await team.distribute(qa_only["buildId"], groups=[qa], notify=False)
    await team.distribute(everyone["buildId"], groups=["everyone"], notify=False)
    await team.distribute(toms["buildId"], emails=[tom.email], notify=False)
    for build in (qa_only, toms):
        r = await team.client.put(
            f"{team.builds}/{build['buildId']}/channels",
            json={"channels": ["default"]},
            headers=team.owner.headers,
        )
        assert r.status_code == 200, r.text
    return {
        "app_path": app_path, "tess": tess, "tom": tom, "tina": tina, "dev": dev,
        "ids": [qa_only["buildId"], everyone["buildId"], toms["buildId"]],
    }  # fmt: skip


async def test_testers_count_only_the_builds_given_to_them(team: Team) -> None:
    seen = await _builds(team)
    qa_only, everyone, toms = seen["ids"]
    expected = {  # who: (the application's buildsCount, default's buildsCount, latestBuildId)
        "dev": (3, 3, toms),
        "tess": (2, 2, everyone),  # QA's and everyone's
        "tom": (2, 2, toms),  # everyone's and his own
        "tina": (1, 1, everyone),
    }
    projects = f"/api/projects/{team.project['id']}/applications"
    for who, (count, on_default, latest) in expected.items():
        account: Account = seen[who]
        r = await team.client.get(projects, headers=account.headers)
        assert r.status_code == 200, r.text
        [listed] = r.json()["applications"]
        assert listed["buildsCount"] == count, who
        r = await team.client.get(seen["app_path"], headers=account.headers)
        assert r.status_code == 200, r.text
        assert r.json()["buildsCount"] == count, who
        r = await team.client.get(f"{seen['app_path']}/channels", headers=account.headers)
        assert r.status_code == 200, r.text
        [default] = r.json()["channels"]
        assert (default["buildsCount"], default["latestBuildId"]) == (on_default, latest), who
    assert qa_only not in {latest for _, _, latest in expected.values()}

    # The console's project and application pages say the same.
    for who, (count, on_default, latest) in expected.items():
        async with console_of(team, seen[who]) as console:
            r = await console.get(f"/projects/{team.project['id']}")
            assert r.status_code == 200, r.text
            assert _cells(r.text, "Ready builds") == [str(count)], who
            r = await console.get(f"/projects/{team.project['id']}/apps/{team.application['id']}")
            assert r.status_code == 200, r.text
            newest = re.findall(r'<td data-label="Newest">(.*?)</td>', r.text, re.S)
            if who == "dev":
                assert _cells(r.text, "Ready builds") == [str(on_default)]
                assert [f"/builds/{latest}" in cell for cell in newest] == [True]
            else:  # the application page leaves channels' counts to developers
                assert (_cells(r.text, "Ready builds"), newest) == ([], []), who
                assert qa_only not in r.text or who == "tess", who


async def test_a_testers_page_of_applications_is_one_statement(team: Team) -> None:
    seen = await _builds(team)
    for n in range(4):  # more applications: still one statement for the page
        await team.api.application(team.owner, team.project["id"], f"More {n}")
    run = statements_run(team.app, "FROM applications")
    r = await team.client.get(
        f"/api/projects/{team.project['id']}/applications", headers=seen["tina"].headers
    )
    assert r.status_code == 200, r.text
    counts = {a["name"]: a["buildsCount"] for a in r.json()["applications"]}
    assert counts == {"Acme Android": 1, **{f"More {n}": 0 for n in range(4)}}
    counting = [s for s in run if "count(" in s.lower()]
    assert len(counting) == 1, counting

"""Issue 40: a build's source on its console page (linked to the repository's host, escaped),
in the application page's list (short commit and branch), and in the new-build mail."""

from __future__ import annotations

from typing import Any

import httpx

from tests.console.test_distribution_pages import browser, text
from tests.console.test_mail_pages import sign_in
from tests.distribution.conftest import Team, settings, smtp, team

__all__ = ["browser", "settings", "smtp", "team"]

COMMIT = "3f0a9c1e5b7d2f4a6c8e0b1d3f5a7c9e1b3d5f7a"
# A valid git branch name that is also HTML: it must show as text, everywhere.
HOSTILE_BRANCH = 'fix/<img-src=x-onerror=alert(1)>"&'


def _page(team: Team, build: dict[str, Any]) -> str:
    return f"/projects/{team.project['id']}/apps/{team.application['id']}/builds/{build['buildId']}"


async def test_the_build_page_shows_the_source_linked_to_github(
    team: Team, browser: httpx.AsyncClient
) -> None:
    repo = "https://github.com/acme/app"
    build = await team.upload(source={
        "commit": COMMIT, "branch": "feature/sign-in", "tag": "v1.4.2", "repository": repo,
        "ciRunUrl": "https://ci.acme.example/runs/812", "pullRequest": 42,
    })  # fmt: skip
    await sign_in(browser, team.owner.email)

    r = await browser.get(_page(team, build))

    assert r.status_code == 200, r.text
    assert (
        "Source Commit 3f0a9c1 Branch feature/sign-in Tag v1.4.2 Pull request #42 "
        f"Repository {repo} CI run https://ci.acme.example/runs/812"
    ) in text(r)
    for href in (
        f"{repo}/commit/{COMMIT}",
        f"{repo}/tree/feature/sign-in",
        f"{repo}/releases/tag/v1.4.2",
        f"{repo}/pull/42",
        repo,
        "https://ci.acme.example/runs/812",
    ):
        assert f'<a href="{href}" rel="noopener noreferrer">' in r.text


async def test_the_source_is_escaped_on_the_pages_and_in_the_mail(
    team: Team, browser: httpx.AsyncClient
) -> None:
    tess = await team.member("tess@example.com")
    build = await team.upload(
        source={"commit": COMMIT, "branch": HOSTILE_BRANCH, "repository": "acme/app"}
    )
    await sign_in(browser, team.owner.email)

    page = await browser.get(_page(team, build))
    listed = await browser.get(f"/projects/{team.project['id']}/apps/{team.application['id']}")

    for r in (page, listed):
        assert r.status_code == 200, r.text
        assert "<img-src" not in r.text
        assert "fix/&lt;img-src=x-onerror=alert(1)&gt;&#34;&amp;" in r.text
    assert f"Branch {HOSTILE_BRANCH}" in text(page)
    assert "acme/app</a>" not in page.text  # owner/name: no host to link to
    # The list: the branch and the short commit, beside the file.
    assert f"{HOSTILE_BRANCH} · 3f0a9c1" in text(listed)

    await team.run_jobs()
    [mail] = team.mails_to(tess.email)
    plain = mail.text.replace("\r\n", "\n")
    assert f"\nBuilt from {HOSTILE_BRANCH} at 3f0a9c1.\n" in plain
    assert "<img-src" not in mail.html
    assert "Built from fix/&lt;img-src=x-onerror=alert(1)&gt;&#34;&amp; at 3f0a9c1." in mail.html


async def test_a_build_without_a_source_shows_no_source(
    team: Team, browser: httpx.AsyncClient
) -> None:
    tess = await team.member("tess@example.com")
    build = await team.upload()
    await sign_in(browser, team.owner.email)

    r = await browser.get(_page(team, build))

    assert r.status_code == 200, r.text
    assert 'id="source"' not in r.text
    await team.run_jobs()
    [mail] = team.mails_to(tess.email)
    assert "Built " not in mail.text

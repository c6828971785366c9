"""Issue 40, "Builds know where they came from": verify takes `source` (commit, branch, tag,
repository, CI run, pull request), each checked as the API checks its own fields; the build
keeps and shows it, with links to the repository's host where it is GitHub, GitLab or
Bitbucket, and the builds list filters on its branch and commit."""

from __future__ import annotations

from typing import Any

import pytest

from buildbay.builds.source import BuildSource, source_links, source_sentence, web_link
from tests.builds.conftest import Builds
from tests.conftest import assert_problem

COMMIT = "3f0a9c1e5b7d2f4a6c8e0b1d3f5a7c9e1b3d5f7a"
OTHER = "0b1d3f5a7c9e1b3d5f7a3f0a9c1e5b7d2f4a6c8e"
GITHUB = {
    "commit": COMMIT.upper(),
    "branch": "feature/sign-in",
    "tag": "v1.4.2",
    "repository": "https://github.com/acme/app",
    "ciRunUrl": "https://github.com/acme/app/actions/runs/812",
    "pullRequest": 42,
}


async def _ready(builds: Builds, data: bytes, source: dict[str, Any] | None) -> dict[str, Any]:
    link = await builds.pending(data)
    fields = {} if source is None else {"source": source}
    r = await builds.verify(link["buildId"], **fields)
    assert r.status_code == 200, r.text
    build: dict[str, Any] = r.json()
    return build


async def test_verify_keeps_the_source_and_the_build_shows_it_with_its_host_s_links(
    builds: Builds,
) -> None:
    build = await _ready(builds, b"PK one", GITHUB)

    repo = "https://github.com/acme/app"
    expected = {
        **GITHUB,
        "commit": COMMIT,  # lower-case, as git prints it
        "links": {
            "repository": repo,
            "commit": f"{repo}/commit/{COMMIT}",
            "branch": f"{repo}/tree/feature/sign-in",
            "tag": f"{repo}/releases/tag/v1.4.2",
            "pullRequest": f"{repo}/pull/42",
        },
    }
    assert build["source"] == expected
    r = await builds.get(build["buildId"])
    assert r.status_code == 200, r.text
    assert r.json()["source"] == expected
    r = await builds.client.get(builds.base, headers=builds.owner.headers)
    assert r.json()["builds"][0]["source"] == expected


async def test_a_build_verified_without_a_source_has_none(builds: Builds) -> None:
    build = await _ready(builds, b"PK none", None)
    assert build["source"] is None
    build = await _ready(builds, b"PK empty", {})
    assert build["source"] is None


@pytest.mark.parametrize(
    ("repository", "pull_request", "links"),
    [
        (
            "https://gitlab.com/acme/mobile/app",
            7,
            {
                "repository": "https://gitlab.com/acme/mobile/app",
                "commit": f"https://gitlab.com/acme/mobile/app/-/commit/{COMMIT}",
                "branch": "https://gitlab.com/acme/mobile/app/-/tree/main",
                "tag": None,
                "pullRequest": "https://gitlab.com/acme/mobile/app/-/merge_requests/7",
            },
        ),
        (
            "https://bitbucket.org/acme/app.git",
            7,
            {
                "repository": "https://bitbucket.org/acme/app",
                "commit": f"https://bitbucket.org/acme/app/commits/{COMMIT}",
                "branch": "https://bitbucket.org/acme/app/branch/main",
                "tag": None,
                "pullRequest": "https://bitbucket.org/acme/app/pull-requests/7",
            },
        ),
        (  # a self-hosted GitLab
            "https://gitlab.acme.example/team/app",
            None,
            {
                "repository": "https://gitlab.acme.example/team/app",
                "commit": f"https://gitlab.acme.example/team/app/-/commit/{COMMIT}",
                "branch": "https://gitlab.acme.example/team/app/-/tree/main",
                "tag": None,
                "pullRequest": None,
            },
        ),
        (  # a host whose pages are not known: the repository's own address only
            "https://git.acme.example/team/app",
            "https://git.acme.example/team/app/pulls/7",
            {
                "repository": "https://git.acme.example/team/app",
                "commit": None,
                "branch": None,
                "tag": None,
                "pullRequest": "https://git.acme.example/team/app/pulls/7",
            },
        ),
        (  # owner/name: no host, no links
            "acme/app",
            7,
            dict.fromkeys(("repository", "commit", "branch", "tag", "pullRequest")),
        ),
    ],
)
async def test_links_follow_each_host_s_pages(
    builds: Builds, repository: str, pull_request: Any, links: dict[str, Any]
) -> None:
    source = {"commit": COMMIT, "branch": "main", "repository": repository}
    if pull_request is not None:
        source["pullRequest"] = pull_request
    build = await _ready(builds, b"PK links", source)
    assert build["source"]["links"] == links
    assert build["source"]["pullRequest"] == pull_request


@pytest.mark.parametrize(
    ("source", "field"),
    [
        ({"commit": "3f0a9c"}, "commit"),  # 6 digits: too short to name a commit
        ({"commit": "3f0a9cz1"}, "commit"),
        ({"commit": "a" * 65}, "commit"),
        ({"commit": 1234567}, "commit"),
        ({"branch": ""}, "branch"),
        ({"branch": "feature..x"}, "branch"),
        ({"branch": "feature/"}, "branch"),
        ({"branch": "has space"}, "branch"),
        ({"branch": "a:b"}, "branch"),
        ({"branch": "x.lock"}, "branch"),
        ({"branch": ".hidden"}, "branch"),
        ({"branch": "@"}, "branch"),
        ({"branch": "a@{1}"}, "branch"),
        ({"branch": "b" * 256}, "branch"),
        ({"branch": "tab\there"}, "branch"),
        ({"tag": "v1.0^"}, "tag"),
        ({"repository": "javascript:alert(1)"}, "repository"),
        ({"repository": "https://ci:s3cret@github.com/acme/app"}, "repository"),
        ({"repository": "https://x-access-token@github.com/acme/app"}, "repository"),
        ({"repository": "ftp://files.acme.example/app"}, "repository"),
        ({"repository": "acme"}, "repository"),
        ({"repository": "../../etc"}, "repository"),
        ({"ciRunUrl": "javascript:alert(1)"}, "ciRunUrl"),
        ({"ciRunUrl": "JaVaScRiPt://github.com/%0aalert(1)"}, "ciRunUrl"),
        ({"ciRunUrl": "https://user:pw@ci.acme.example/run/1"}, "ciRunUrl"),
        ({"ciRunUrl": "https://ci.acme.example/run 1"}, "ciRunUrl"),
        ({"ciRunUrl": "https://"}, "ciRunUrl"),
        ({"pullRequest": 0}, "pullRequest"),
        ({"pullRequest": -3}, "pullRequest"),
        ({"pullRequest": "42"}, "pullRequest"),
        ({"pullRequest": True}, "pullRequest"),
        ({"pullRequest": 2**31}, "pullRequest"),
        ({"pullRequest": "data:text/html,<script>"}, "pullRequest"),
        ({"runner": "x"}, "runner"),  # no field the API does not know
    ],
)
async def test_verify_refuses_a_source_the_api_would_not_show(
    builds: Builds, source: dict[str, Any], field: str
) -> None:
    link = await builds.pending(b"PK bad")

    r = await builds.verify(link["buildId"], source=source)

    body = assert_problem(r, 422, "validation_error")
    assert any(field in e["field"] for e in body["errors"]), body
    r = await builds.get(link["buildId"])
    assert r.json()["status"] == "pending"  # nothing verified with a refused source
    assert r.json()["source"] is None


async def _list(builds: Builds, **params: str) -> list[str]:
    r = await builds.client.get(builds.base, params=params, headers=builds.owner.headers)
    assert r.status_code == 200, r.text
    return [b["buildId"] for b in r.json()["builds"]]


async def test_the_list_filters_by_branch_and_by_commit_or_its_start(builds: Builds) -> None:
    main_1 = await _ready(builds, b"PK m1", {"commit": COMMIT, "branch": "main"})
    feature = await _ready(builds, b"PK f", {"commit": OTHER, "branch": "feature/x"})
    main_2 = await _ready(builds, b"PK m2", {"commit": OTHER[:12], "branch": "main"})
    await _ready(builds, b"PK none", None)
    pending = await builds.pending(b"PK pending")
    r = await builds.verify(pending["buildId"], source={"branch": "main", "commit": "f" * 40})
    assert r.status_code == 200  # (verified: the filter then sees it)

    assert await _list(builds, branch="main") == [
        r.json()["buildId"], main_2["buildId"], main_1["buildId"]
    ]  # fmt: skip
    assert await _list(builds, branch="feature/x") == [feature["buildId"]]
    assert await _list(builds, branch="Main") == []  # exactly
    assert await _list(builds, branch="mai") == []
    assert await _list(builds, commit=COMMIT) == [main_1["buildId"]]
    assert await _list(builds, commit=COMMIT[:7].upper()) == [main_1["buildId"]]
    assert await _list(builds, commit=OTHER[:7]) == [main_2["buildId"], feature["buildId"]]
    assert await _list(builds, commit=OTHER) == [feature["buildId"]]  # longer than main_2's
    assert await _list(builds, commit=OTHER[:12], branch="main") == [main_2["buildId"]]
    assert await _list(builds, branch="main", limit="1") == [r.json()["buildId"]]
    # Pages of a filtered list.
    page = await builds.client.get(
        builds.base, params={"branch": "main", "limit": "2"}, headers=builds.owner.headers
    )
    cursor = page.json()["nextCursor"]
    assert cursor
    assert await _list(builds, branch="main", limit="2", cursor=cursor) == [main_1["buildId"]]


@pytest.mark.parametrize(
    "params",
    [{"commit": "3f0a9c"}, {"commit": "3f0a9cz1"}, {"commit": "a" * 65}, {"branch": "b" * 256}],
)
async def test_the_list_refuses_a_commit_filter_that_names_no_commit(
    builds: Builds, params: dict[str, str]
) -> None:
    r = await builds.client.get(builds.base, params=params, headers=builds.owner.headers)
    body = assert_problem(r, 422, "validation_error")
    assert any(name in e["field"] for e in body["errors"] for name in params), body


def test_links_are_only_ever_http_addresses_whatever_was_stored() -> None:
    """The pages link through `source_links` and `web_link` only: a value stored before the
    API's checks, or by hand, never becomes a `javascript:` (or any other) link."""
    hostile = BuildSource(
        commit=COMMIT,
        branch="main",
        repository="javascript:alert(1)//github.com/acme/app",
        ci_run_url="javascript:alert(1)",
        pull_request="vbscript:msgbox(1)",
    )
    links = source_links(hostile)
    assert (links.repository, links.commit, links.branch, links.pull_request) == (None,) * 4
    assert web_link("javascript:alert(1)") is None
    assert web_link(" https://ci.example/1") is None
    assert web_link("https://u:p@ci.example/1") is None
    assert web_link("https://ci.example/1") == "https://ci.example/1"
    # A branch is a path of the host's page, its odd characters encoded.
    odd = source_links(BuildSource(branch='x/"><img>#?', repository="https://github.com/a/b"))
    assert odd.branch == "https://github.com/a/b/tree/x/%22%3E%3Cimg%3E%23%3F"


def test_the_source_in_words() -> None:
    assert source_sentence(BuildSource()) is None
    assert source_sentence(BuildSource(commit=COMMIT, branch="main")) == (
        "Built from main at 3f0a9c1."
    )
    assert source_sentence(BuildSource(commit=COMMIT, tag="v2", pull_request=9)) == (
        "Built at 3f0a9c1 (tag v2, pull request #9)."
    )
    assert source_sentence(BuildSource(tag="v2")) == "Built from tag v2."

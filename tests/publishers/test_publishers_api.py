"""Adding, listing and removing an application's trusted publishers; what a subject pattern
means."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from buildbay.publishers.keys import IssuerRefused, check_issuer
from buildbay.publishers.subjects import PatternRefused, check_pattern, subject_matches
from tests.conftest import Account, Api, assert_problem

GITHUB = "https://token.actions.githubusercontent.com"


@pytest.mark.parametrize(
    ("pattern", "subject", "matches"),
    [
        ("repo:acme/shop:ref:refs/heads/main", "repo:acme/shop:ref:refs/heads/main", True),
        ("repo:acme/shop:ref:refs/heads/main", "repo:acme/shop:ref:refs/heads/mainx", False),
        ("repo:acme/shop:ref:refs/heads/*", "repo:acme/shop:ref:refs/heads/dev", True),
        ("repo:acme/shop:ref:refs/heads/*", "repo:acme/shop:ref:refs/heads/a/b", False),
        ("repo:acme/shop:ref:refs/heads/*", "repo:acme/shop:ref:refs/heads/", False),
        ("repo:acme/shop:environment:*", "repo:acme/shop:environment:prod", True),
        ("repo:acme/shop:**", "repo:acme/shop:ref:refs/heads/a/b", True),
        ("repo:acme/shop:**", "repo:acme/shopping:ref:refs/heads/main", False),
        ("project_path:acme/shop:ref_type:branch:ref:*",
         "project_path:acme/shop:ref_type:branch:ref:main", True),
        ("repo:acme/shop:ref:refs/heads/mai.", "repo:acme/shop:ref:refs/heads/main", False),
    ],
)  # fmt: skip
def test_a_subject_pattern_matches_as_documented(pattern: str, subject: str, matches: bool) -> None:
    assert subject_matches(check_pattern(pattern), subject) is matches


@pytest.mark.parametrize(
    "pattern",
    ["", " ", "**", "repo:**", "repo:acme*", "repo:*/shop:ref:main", "repo:acme/shop:**:x",
     "repo:acme/shop:***", "repo:acme/shop:ref main", "x" * 501],
)  # fmt: skip
def test_a_pattern_that_could_trust_other_repositories_is_refused(pattern: str) -> None:
    with pytest.raises(PatternRefused):
        check_pattern(pattern)


async def test_an_admin_adds_lists_and_removes_publishers(
    client: httpx.AsyncClient, api: Api, owner: Account
) -> None:
    project = await api.project(owner)
    app = await api.application(owner, project["id"])
    path = f"/api/projects/{project['id']}/applications/{app['id']}/trusted-publishers"
    body = {"issuer": GITHUB, "subjectPattern": "repo:acme/shop:ref:refs/heads/main",
            "audience": "buildbay.example.com"}  # fmt: skip

    r = await client.post(path, json=body, headers=owner.headers)

    assert r.status_code == 201, r.text
    added: dict[str, Any] = r.json()
    assert {k: added[k] for k in body} == body
    assert added["applicationId"] == app["id"]
    assert added["createdBy"] == owner.user["id"]
    assert_problem(await client.post(path, json=body, headers=owner.headers), 409,
                   "publisher_exists")  # fmt: skip
    listed = (await client.get(path, headers=owner.headers)).json()
    assert listed == {"trustedPublishers": [added], "nextCursor": None}
    assert (await client.delete(f"{path}/{added['id']}", headers=owner.headers)).status_code == 204
    assert_problem(await client.delete(f"{path}/{added['id']}", headers=owner.headers), 404,
                   "publisher_not_found")  # fmt: skip


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("issuer", "http://token.actions.githubusercontent.com"),
        ("issuer", "https://10.0.0.1"),
        ("issuer", "https://token.actions.githubusercontent.com/"),
        ("issuer", "http://192.168.1.1:8080"),
        ("subjectPattern", "repo:*"),
        ("subjectPattern", ""),
        ("audience", ""),
        ("audience", "a b"),
        ("audience", "build\x1b[2Jbay"),  # a terminal's escape, shown in lists and the audit log
        ("audience", "build\u202ebay"),
    ],
)
async def test_a_publisher_that_cannot_be_trusted_is_refused(
    client: httpx.AsyncClient, api: Api, owner: Account, field: str, value: str
) -> None:
    project = await api.project(owner)
    app = await api.application(owner, project["id"])
    body = {"issuer": GITHUB, "subjectPattern": "repo:acme/shop:**", "audience": "bb"}

    r = await client.post(
        f"/api/projects/{project['id']}/applications/{app['id']}/trusted-publishers",
        json={**body, field: value}, headers=owner.headers,
    )  # fmt: skip

    problem = assert_problem(r, 422)
    assert field in problem["detail"] or any(e["field"].endswith(field) for e in problem["errors"])


async def test_a_developer_cannot_add_a_publisher(
    client: httpx.AsyncClient, api: Api, owner: Account
) -> None:
    project = await api.project(owner)
    app = await api.application(owner, project["id"])
    developer = await api.register()
    await api.add_member(owner, project["id"], developer, "developer")

    r = await client.post(
        f"/api/projects/{project['id']}/applications/{app['id']}/trusted-publishers",
        json={"issuer": GITHUB, "subjectPattern": "repo:acme/shop:**", "audience": "bb"},
        headers=developer.headers,
    )

    assert_problem(r, 403, "insufficient_role")


@pytest.mark.parametrize(
    ("issuer", "development", "trusted"),
    [
        ("https://token.actions.githubusercontent.com", False, True),
        ("https://gitlab.example.com", False, True),
        ("http://127.0.0.1:8080", True, True),  # a provider on the same machine, in development
        ("http://localhost:8080", True, True),
        ("http://127.0.0.1:8080", False, False),
        ("https://127.0.0.1", False, False),
        ("https://169.254.169.254", True, False),  # development allows loopback, nothing else
        ("http://10.0.0.1", True, False),
        ("https://gitlab.example.com/", False, False),
        ("https://gitlab.example.com?x=1", False, False),
        ("https://user:pw@gitlab.example.com", False, False),
        ("ftp://gitlab.example.com", False, False),
    ],
)
def test_an_issuer_is_https_and_public_but_a_loopback_one_in_development(
    issuer: str, development: bool, trusted: bool
) -> None:
    try:
        check_issuer(issuer, development=development)
    except IssuerRefused:
        assert not trusted
    else:
        assert trusted

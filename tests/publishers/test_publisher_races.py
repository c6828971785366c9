"""Trusted publishers added at the same moment: the rules hold as they do one at a time.

On PostgreSQL two requests interleave between a rule's read and its write; on SQLite the
in-process requests of these tests do not (one writer), so the races run with the PostgreSQL
suite only (as tests/projects/test_member_races.py)."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from buildbay.publishers.service import MAX_PUBLISHERS
from tests.conftest import PG_URL, Account, Api, assert_problem

GITHUB = "https://token.actions.githubusercontent.com"
TRIALS = 8
race = pytest.mark.skipif(
    not PG_URL, reason="the race needs PostgreSQL (SQLite's in-process requests never interleave)"
)


def _body(n: int) -> dict[str, str]:
    return {"issuer": GITHUB, "subjectPattern": f"repo:acme/shop{n}:**",
            "audience": "buildbay.example.com"}  # fmt: skip


async def _path(api: Api, owner: Account, n: int) -> str:
    project = await api.project(owner, f"Acme {n}")
    app = await api.application(owner, project["id"])
    return f"/api/projects/{project['id']}/applications/{app['id']}/trusted-publishers"


async def _count(client: httpx.AsyncClient, path: str, owner: Account) -> int:
    r = await client.get(path, params={"limit": 100}, headers=owner.headers)
    assert r.status_code == 200, r.text
    return len(r.json()["trustedPublishers"])


@race
@pytest.mark.postgres
async def test_the_same_publisher_added_twice_at_once_is_added_once(
    client: httpx.AsyncClient, api: Api, owner: Account
) -> None:
    for trial in range(TRIALS):
        path = await _path(api, owner, trial)

        answers = await asyncio.gather(
            *(client.post(path, json=_body(0), headers=owner.headers) for _ in range(2))
        )

        assert sorted(r.status_code for r in answers) == [201, 409], [r.text for r in answers]
        assert_problem(next(r for r in answers if r.status_code == 409), 409, "publisher_exists")
        assert await _count(client, path, owner) == 1


@race
@pytest.mark.postgres
async def test_publishers_added_at_once_stop_at_the_limit(
    client: httpx.AsyncClient, api: Api, owner: Account
) -> None:
    for trial in range(TRIALS // 2):
        path = await _path(api, owner, trial)
        for n in range(MAX_PUBLISHERS - 1):
            r = await client.post(path, json=_body(n), headers=owner.headers)
            assert r.status_code == 201, r.text

        answers = await asyncio.gather(
            *(client.post(path, json=_body(100 + n), headers=owner.headers) for n in range(3))
        )

        assert sorted(r.status_code for r in answers) == [201, 409, 409], [r.text for r in answers]
        for refused in (r for r in answers if r.status_code == 409):
            assert_problem(refused, 409, "too_many_publishers")
        assert await _count(client, path, owner) == MAX_PUBLISHERS

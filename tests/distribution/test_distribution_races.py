"""Distributions of one build sent at the same moment, their jobs run at the same moment:
every tester is mailed once (on PostgreSQL, where in-process requests interleave; SQLite has
one writer)."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from buildbay.context import AppContext
from tests.conftest import PG_URL
from tests.distribution.conftest import Team

pytestmark = [
    pytest.mark.skipif(not PG_URL, reason="the race needs PostgreSQL"),
    pytest.mark.postgres,
]
TRIALS = 3
TESTERS = 8


async def test_distributing_one_build_at_once_mails_every_tester_once(team: Team) -> None:
    r = await team.client.put(
        f"/api/projects/{team.project['id']}/applications/{team.application['id']}",
        json={"autoDistributeGroups": []},
        headers=team.owner.headers,
    )
    assert r.status_code == 200, r.text
    testers = [await team.member(f"t{n}@example.com") for n in range(TESTERS)]
    emails = [t.email for t in testers]
    qa = await team.group("QA", *emails)
    ctx: AppContext = team.app.state.ctx
    assert ctx.jobs is not None

    for trial in range(TRIALS):
        before = len(team.smtp.messages())
        build = await team.upload()
        path = f"{team.builds}/{build['buildId']}/distribute"
        bodies = [{"groups": [qa]}, {"groups": [qa, "everyone"]}, {"emails": emails}]

        answers = await asyncio.gather(
            *(team.client.post(path, json=b, headers=team.owner.headers) for b in bodies)
        )
        assert [r.status_code for r in answers] == [200, 200, 200], [r.text for r in answers]
        await asyncio.gather(ctx.jobs.run_until_idle(), ctx.jobs.run_until_idle())
        await ctx.jobs.run_until_idle()

        sent = Counter(m.recipients[0] for m in team.smtp.messages()[before:])
        assert sent == Counter(emails), f"trial {trial}: {sent}"

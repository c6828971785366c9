"""First sign-ins sent at the same moment: the rules hold as they do one at a time.

On PostgreSQL two requests interleave between a rule's read and its write; on SQLite the
in-process requests of these tests do not (one writer), so the race runs with the PostgreSQL
suite only (as tests/projects/test_member_races.py)."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from fastapi import FastAPI
from sqlalchemy import func, select, update

from buildbay.auth.models import User
from buildbay.sso.models import SsoIdentity
from tests.conftest import PG_URL, Api
from tests.oidc_provider import OidcProvider
from tests.sso.conftest import open_browser

pytestmark = pytest.mark.slow

TRIALS = 8
race = pytest.mark.skipif(
    not PG_URL, reason="the race needs PostgreSQL (SQLite's in-process requests never interleave)"
)


@race
@pytest.mark.postgres
async def test_two_people_of_one_address_signing_in_at_once_link_one_of_them(
    app: FastAPI, provider: OidcProvider, api: Api
) -> None:
    for _ in range(TRIALS):
        tag = uuid.uuid4().hex[:8]
        email = f"shared-{tag}@example.com"
        account = await api.register(email)
        async with app.state.ctx.sessions() as db:  # verified: linked as it is
            await db.execute(
                update(User).where(User.email == email).values(email_verified_at=User.created_at)
            )
            await db.commit()
        # Two people at the provider (a recycled address, a misconfigured directory) with it.
        subjects = [f"first-{tag}", f"second-{tag}"]
        for sub in subjects:
            provider.set_user(sub, email=email, email_verified=True)
        async with open_browser(app, provider) as one, open_browser(app, provider) as two:
            callbacks = [
                await browser.at_provider(await browser.start(), sub)
                for browser, sub in zip((one, two), subjects, strict=True)
            ]

            answers = await asyncio.gather(one.callback(callbacks[0]), two.callback(callbacks[1]))

            landed = sorted(r.headers["location"].split("?")[0] for r in answers)
            assert landed == ["/login", "/projects"], landed
        async with app.state.ctx.sessions() as db:
            links = await db.scalar(
                select(func.count())
                .select_from(SsoIdentity)
                .where(SsoIdentity.user_id == account.user["id"])
            )
        assert links == 1

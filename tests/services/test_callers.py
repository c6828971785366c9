"""Who calls: the user behind an access token comes back as a frozen record, which a cache may
share between requests, so a change made to it is refused rather than silently lost, and it
carries no password hash."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.auth.authentication import Authentication
from buildbay.auth.cache import AccessTokenCache
from buildbay.auth.models import Session
from buildbay.auth.reads import UserRecord
from buildbay.auth.tokens import AccessTokenCodec
from buildbay.clock import FrozenClock
from buildbay.db.reads import Reads
from tests.conftest import TEST_SECRET
from tests.services.conftest import Given


async def test_the_caller_is_a_frozen_record_of_the_users_row_without_its_hash(
    db: AsyncSession, given: Given, clock: FrozenClock
) -> None:
    user = await given.user("ada@example.com")
    now = clock.now()
    db.add(Session(id="ses_1", user_id=user.id, created_at=now, expires_at=now + timedelta(days=1)))
    await db.flush()
    codec = AccessTokenCodec(TEST_SECRET.encode(), timedelta(hours=1))
    token = codec.issue(user.id, "ses_1", now)
    authentication = Authentication(Reads.within(db), codec, now, AccessTokenCache())

    first = await authentication.authenticate_access_token(token)
    cached = await authentication.authenticate_access_token(token)

    assert isinstance(first.user, UserRecord)
    assert (first.user.id, first.user.email, first.user.plan) == (user.id, user.email, user.plan)
    assert not hasattr(first.user, "password_hash")
    assert cached.user is first.user  # the cache's copy, shared
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.user.name = "Changed"  # type: ignore[misc]

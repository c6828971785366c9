"""InstallLinks: `share` reuses the build's live link and makes a new one only when there is none
(revoked, expired), revoking is once and for good, and what a token opens."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import delete
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.audit.record import OPERATOR
from buildbay.auth.models import User
from buildbay.builds.enums import BuildStatus
from buildbay.builds.install import InstallLinkReads, InstallLinks, InstallTokens
from buildbay.builds.models import Build
from buildbay.builds.records import BuildRecord
from buildbay.clock import FrozenClock
from buildbay.db.reads import Reads
from buildbay.errors import Conflict, Forbidden, Gone, NotFound
from buildbay.projects.enums import ProjectRole
from tests.conftest import BASE_URL
from tests.services.conftest import Given, raises

HOURS = 24
OWNER, DEVELOPER, TESTER = ProjectRole.OWNER, ProjectRole.DEVELOPER, ProjectRole.TESTER


class Links:
    """InstallLinks (and their reads) as a request at the clock's current time gets them."""

    def __init__(self, db: AsyncSession, clock: FrozenClock, tokens: InstallTokens) -> None:
        self.db, self.clock, self.tokens = db, clock, tokens

    @property
    def now(self) -> InstallLinks:
        return InstallLinks(self.db, self.read)

    @property
    def read(self) -> InstallLinkReads:
        return InstallLinkReads(Reads.within(self.db), self.clock.now(), self.tokens, BASE_URL)


@pytest.fixture
def links(db: AsyncSession, clock: FrozenClock, install_tokens: InstallTokens) -> Links:
    return Links(db, clock, install_tokens)


@pytest.fixture
async def owner(given: Given) -> User:
    return await given.user()


@pytest.fixture
async def ready(given: Given, owner: User) -> BuildRecord:
    application = await given.application(await given.project(owner))
    return await given.build(application, owner, status=BuildStatus.READY)


async def test_sharing_a_build_twice_gives_the_same_link(
    links: Links, ready: BuildRecord, owner: User, clock: FrozenClock
) -> None:
    first = await links.now.share(ready, owner, HOURS)
    clock.advance(hours=1)

    again = await links.now.share(ready, owner, HOURS)

    assert again.id == first.id
    assert first.expires_at == again.expires_at == first.created_at + timedelta(hours=HOURS)
    assert [listed.link.id for listed in await links.read.of_build(ready)] == [first.id]


async def test_sharing_after_a_revoke_makes_a_new_link(
    links: Links, ready: BuildRecord, owner: User
) -> None:
    first = await links.now.share(ready, owner, HOURS)
    await links.now.revoke(first, ready, by=OPERATOR)

    second = await links.now.share(ready, owner, HOURS)

    assert second.id != first.id
    assert [listed.link.id for listed in await links.read.of_build(ready)] == [second.id, first.id]


async def test_sharing_after_the_link_expired_makes_a_new_link(
    links: Links, ready: BuildRecord, owner: User, clock: FrozenClock
) -> None:
    first = await links.now.share(ready, owner, 1)
    clock.advance(hours=1)

    second = await links.now.share(ready, owner, HOURS)

    assert second.id != first.id
    assert (await links.read.current([ready.id]))[ready.id].id == second.id


async def test_a_link_with_less_than_min_left_to_live_counts_as_none(
    links: Links, ready: BuildRecord, owner: User, clock: FrozenClock
) -> None:
    first = await links.now.share(ready, owner, HOURS)
    clock.advance(hours=HOURS - 2)  # two hours left

    kept = await links.now.share(ready, None, HOURS, min_left=timedelta(hours=2))
    replaced = await links.now.share(ready, None, HOURS, min_left=timedelta(hours=3))

    assert kept.id == first.id
    assert replaced.id != first.id
    assert replaced.created_by is None  # made by the server (an update check's)
    assert replaced.expires_at == clock.now() + timedelta(hours=HOURS)


async def test_a_pending_build_cannot_be_shared(
    links: Links, given: Given, owner: User, ready: BuildRecord
) -> None:
    application = await given.application(await given.project(owner))
    pending = await given.build(application, owner)

    with raises(Conflict, "build_not_ready"):
        await links.now.share(pending, owner, HOURS)


async def test_a_revoked_link_stays_revoked_from_its_first_revoke(
    links: Links, ready: BuildRecord, owner: User, clock: FrozenClock
) -> None:
    link = await links.now.share(ready, owner, HOURS)
    await links.now.revoke(link, ready, by=OPERATOR)
    clock.advance(minutes=5)

    await links.now.revoke(link, ready, by=OPERATOR)

    (stored,) = await links.read.of_build(ready)
    assert stored.link.revoked_at == link.created_at
    with raises(Gone, "install_link_revoked"):
        await links.read.open(links.tokens.token(link.id))


async def test_a_token_opens_its_build_until_the_link_expires(
    links: Links, ready: BuildRecord, owner: User, clock: FrozenClock
) -> None:
    link = await links.now.share(ready, owner, 1)
    url = links.read.url(link)
    token = url.removeprefix(f"{BASE_URL}/install/")

    target = await links.read.open(token)
    assert (target.link.id, target.build.id, target.application.id) == (
        link.id,
        ready.id,
        ready.application_id,
    )
    clock.advance(hours=1)
    with raises(Gone, "install_link_expired"):
        await links.read.open(token)


async def test_a_forged_token_is_not_found_and_a_deleted_builds_is_gone(
    links: Links, ready: BuildRecord, owner: User, db: AsyncSession
) -> None:
    link = await links.now.share(ready, owner, HOURS)
    token = links.tokens.token(link.id)

    forged = token[:-1] + ("B" if token.endswith("A") else "A")

    with raises(NotFound, "install_link_not_found"):
        await links.read.open(forged)
    await db.execute(delete(Build).where(Build.id == ready.id))
    with raises(Gone, "install_link_gone"):
        await links.read.open(token)


async def test_a_persons_own_link_is_personal_reused_and_never_a_shared_one(
    links: Links, ready: BuildRecord, owner: User, given: Given, clock: FrozenClock
) -> None:
    """Who may revoke or make links is the authorization's (a developer or higher: the API's
    and the console's tests); `own` is what a tester installs through."""
    tester = await given.user()
    shared = await links.now.share(ready, owner, HOURS)

    mine = await links.now.own(ready, tester, HOURS)
    clock.advance(hours=1)
    again = await links.now.own(ready, tester, HOURS)

    assert mine.id != shared.id
    assert (mine.owner_id, mine.created_by) == (tester.id, tester.id)
    assert again.id == mine.id
    listed = {item.link.id: item for item in await links.read.of_build(ready)}
    assert listed[mine.id].owner is not None
    assert listed[mine.id].owner.user_id == tester.id
    assert listed[shared.id].owner is None
    await links.now.revoke(mine, ready, by=OPERATOR)
    assert (await links.now.own(ready, tester, HOURS)).id not in {mine.id, shared.id}


async def test_a_shared_link_opens_without_asking_who_is_signed_in(
    links: Links, ready: BuildRecord, owner: User
) -> None:
    """Who is signed in on the browser matters only for a personal link: a shared link's opens
    (the busiest install pages) cost no look-up of the console's session."""
    asked: list[str] = []

    async def visitor() -> str | None:
        asked.append("asked")
        return "usr_someone_else"

    shared = await links.now.share(ready, owner, HOURS)
    target = await links.read.open(links.tokens.token(shared.id), visitor)
    assert (target.link.id, asked) == (shared.id, [])

    personal = await links.now.own(ready, owner, HOURS)  # the owner's own link: theirs alone
    with raises(Forbidden, "not_your_install_link"):
        await links.read.open(links.tokens.token(personal.id), visitor)
    assert asked == ["asked"]

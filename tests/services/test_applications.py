"""ApplicationService and applications/reads.py: create and update (the retention rule's two
columns), the list's pages with each application's count of ready builds, and a delete whose
files go after its commit."""

from __future__ import annotations

import pytest
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.applications.enums import Platform
from buildbay.applications.models import Application
from buildbay.applications.reads import application_view, applications_page
from buildbay.applications.service import ApplicationService
from buildbay.audit.record import OPERATOR
from buildbay.builds.enums import BuildStatus
from buildbay.builds.models import Build
from buildbay.clock import FrozenClock
from buildbay.db.engine import finish
from buildbay.db.reads import Reads
from buildbay.ids import decode_cursor
from buildbay.storage.local import LocalStorage
from tests.services.conftest import Given


@pytest.fixture
def applications(db: AsyncSession, clock: FrozenClock) -> ApplicationService:
    return ApplicationService(db, clock.now())


async def test_an_application_is_created_with_its_retention_rule_and_no_builds(
    applications: ApplicationService, given: Given, db: AsyncSession, clock: FrozenClock
) -> None:
    project = await given.project(await given.user())

    view = await applications.create(
        project,
        {"name": "Acme iOS", "platform": Platform.IOS, "retention": {"keep_last": 3}},
        by=OPERATOR,
    )
    await finish(db, ok=True)

    stored = await db.get(Application, view.application.id)
    assert stored is not None
    assert (stored.project_id, stored.name, stored.platform) == (project.id, "Acme iOS", "ios")
    assert (stored.retention_keep_last, stored.retention_keep_days) == (3, None)
    assert stored.bundle_id is None
    assert stored.created_at == stored.updated_at == clock.now()
    assert view.builds_count == 0


async def test_an_update_changes_only_what_it_names_and_moves_updated_at(
    given: Given, db: AsyncSession, clock: FrozenClock
) -> None:
    project = await given.project(await given.user())
    created = await ApplicationService(db, clock.now()).create(
        project,
        {"name": "Acme", "bundle_id": "com.acme", "retention": {"keep_days": 30}},
        by=OPERATOR,
    )
    clock.advance(minutes=5)

    view = await ApplicationService(db, clock.now()).update(
        created.application, {"name": "Acme 2"}, by=OPERATOR
    )

    application = view.application
    assert (application.name, application.bundle_id) == ("Acme 2", "com.acme")
    assert application.retention_keep_days == 30
    assert application.updated_at == clock.now() != application.created_at


async def test_a_null_retention_clears_both_of_its_columns(
    applications: ApplicationService, given: Given
) -> None:
    project = await given.project(await given.user())
    created = await applications.create(
        project, {"name": "Acme", "retention": {"keep_last": 5, "keep_days": 7}}, by=OPERATOR
    )

    view = await applications.update(created.application, {"retention": None}, by=OPERATOR)

    assert view.application.retention_keep_last is None
    assert view.application.retention_keep_days is None


async def test_the_builds_count_counts_only_ready_builds(given: Given, reads: Reads) -> None:
    owner = await given.user()
    project = await given.project(owner)
    application, other = await given.application(project), await given.application(project)
    for status in (BuildStatus.READY, BuildStatus.READY, BuildStatus.PENDING):
        await given.build(application, owner, status=status)
    await given.build(other, owner, status=BuildStatus.READY)

    assert (await application_view(reads, application)).builds_count == 2
    page, _ = await applications_page(reads, project.id, 10, None)
    assert {v.application.id: v.builds_count for v in page} == {application.id: 2, other.id: 1}


async def test_the_list_pages_a_projects_applications_newest_first(
    given: Given, reads: Reads
) -> None:
    owner = await given.user()
    project, elsewhere = await given.project(owner), await given.project(owner)
    created = [await given.application(project, f"App {n}") for n in range(5)]
    await given.application(elsewhere, "Not in this project")

    seen: list[str] = []
    page, cursor = await applications_page(reads, project.id, 2, None)
    seen += [v.application.name for v in page]
    while cursor is not None:
        page, cursor = await applications_page(reads, project.id, 2, decode_cursor(cursor))
        seen += [v.application.name for v in page]

    assert seen == [a.name for a in reversed(created)]


async def test_a_page_after_the_last_application_is_empty(given: Given, reads: Reads) -> None:
    project = await given.project(await given.user())
    oldest = await given.application(project)

    assert await applications_page(reads, project.id, 10, oldest.id) == ([], None)


async def test_a_deleted_applications_files_go_only_once_the_delete_has_committed(
    applications: ApplicationService, given: Given, db: AsyncSession, storage: LocalStorage
) -> None:
    owner = await given.user()
    project = await given.project(owner)
    application, kept = await given.application(project), await given.application(project)
    ready = await given.build(application, owner, status=BuildStatus.READY)
    pending = await given.build(application, owner, stored=True)
    other = await given.build(kept, owner, status=BuildStatus.READY)

    await applications.delete(application, storage, by=OPERATOR)
    await db.flush()

    assert await storage.stat(ready.storage_key) is not None  # not before the commit
    await finish(db, ok=True)
    assert await storage.stat(ready.storage_key) is None
    assert await storage.stat(pending.storage_key) is None
    assert await storage.stat(other.storage_key) is not None  # another application's
    assert await db.get(Build, ready.id) is None  # the rows went with it


async def test_an_application_delete_that_rolls_back_keeps_its_files(
    applications: ApplicationService, given: Given, db: AsyncSession, storage: LocalStorage
) -> None:
    owner = await given.user()
    application = await given.application(await given.project(owner))
    build = await given.build(application, owner, status=BuildStatus.READY)
    key, build_id = build.storage_key, build.id

    await applications.delete(application, storage, by=OPERATOR)
    await db.flush()
    await finish(db, ok=False)

    assert await storage.stat(key) is not None
    assert await db.get(Build, build_id) is not None

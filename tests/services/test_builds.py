"""BuildService: what an upload link refuses (the plan's largest file, the storage quota), what
verify refuses with a real LocalStorage (bytes missing or short, another checksum, another app),
verify's retry, and a build delete whose bytes go after its commit."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.applications.enums import Platform
from buildbay.applications.models import Application
from buildbay.applications.reads import APPLICATION
from buildbay.applications.records import ApplicationRecord
from buildbay.audit.record import OPERATOR
from buildbay.auth.models import User
from buildbay.builds.enums import BuildStatus
from buildbay.builds.models import Build
from buildbay.builds.readers import MetadataReaders
from buildbay.builds.service import BuildService
from buildbay.clock import FrozenClock
from buildbay.config import Plan, Settings
from buildbay.db.engine import finish
from buildbay.errors import Conflict, NotFound, PayloadTooLarge, ValidationFailed
from buildbay.storage.local import LocalStorage
from tests.builds.test_metadata import INFO, ipa
from tests.services.conftest import Given, raises

DATA = b"PK\x03\x04 a small build file"
IPA = ipa().getvalue()  # com.example.app


@pytest.fixture
async def builds(
    db: AsyncSession, clock: FrozenClock, settings: Settings, storage: LocalStorage
) -> AsyncIterator[BuildService]:
    readers = MetadataReaders.of(settings)
    yield BuildService(db, clock.now(), settings, storage, readers)
    await readers.aclose()


@pytest.fixture
async def owner(given: Given) -> User:
    return await given.user()


@pytest.fixture
async def application(given: Given, owner: User) -> ApplicationRecord:
    return await given.application(await given.project(owner))


async def count_builds(db: AsyncSession) -> int:
    return await db.scalar(select(func.count(Build.id))) or 0


# -- step 1: the upload link --------------------------------------------------------------------


async def test_an_upload_link_makes_a_pending_build_that_expires_with_the_link(
    builds: BuildService,
    application: ApplicationRecord,
    owner: User,
    clock: FrozenClock,
    settings: Settings,
) -> None:
    build, target = await builds.create_upload_link(application, owner, "app.apk", 812, None)

    assert build.status is BuildStatus.PENDING
    assert (build.file_name, build.file_size, build.uploaded_by) == ("app.apk", 812, owner.id)
    assert build.storage_key == f"{application.project_id}/{application.id}/{build.id}"
    assert build.expires_at == clock.now() + timedelta(seconds=settings.upload_link_ttl_seconds)
    assert target.url.startswith(f"http://testserver/storage/uploads/{application.project_id}")


async def test_a_file_above_the_plans_largest_is_refused_before_any_row(
    builds: BuildService,
    application: ApplicationRecord,
    owner: User,
    db: AsyncSession,
    settings: Settings,
) -> None:
    settings.max_upload_bytes_free = 1000

    with raises(PayloadTooLarge, "file_too_large") as caught:
        await builds.create_upload_link(application, owner, "big.apk", 1001, None)

    assert caught.value.detail == (
        "This file (1001 bytes) is larger than the free plan's largest build file (1000 bytes)"
    )
    assert await count_builds(db) == 0
    await builds.create_upload_link(application, owner, "fits.apk", 1000, None)


async def test_a_larger_plan_takes_a_larger_file(
    builds: BuildService, application: ApplicationRecord, given: Given, settings: Settings
) -> None:
    settings.max_upload_bytes_free, settings.max_upload_bytes_pro = 1000, 2000
    pro = await given.user(plan=Plan.PRO)

    build, _ = await builds.create_upload_link(application, pro, "big.apk", 2000, None)

    assert build.file_size == 2000


async def test_a_build_that_would_pass_the_quota_is_refused_counting_pending_ones(
    builds: BuildService,
    application: ApplicationRecord,
    owner: User,
    given: Given,
    settings: Settings,
) -> None:
    settings.quota_bytes_free = 100
    await given.build(application, owner, b"r" * 60, status=BuildStatus.READY)
    await given.build(application, owner, b"p" * 30)  # reserved from its link on

    with raises(PayloadTooLarge, "quota_exceeded") as caught:
        await builds.create_upload_link(application, owner, "big.apk", 11, None)

    assert "past the free plan's 100 bytes" in caught.value.detail
    await builds.create_upload_link(application, owner, "fits.apk", 10, None)


async def test_the_quota_counts_only_the_uploaders_own_builds(
    builds: BuildService,
    application: ApplicationRecord,
    owner: User,
    given: Given,
    settings: Settings,
) -> None:
    settings.quota_bytes_free = 100
    await given.build(application, owner, b"o" * 90, status=BuildStatus.READY)
    developer = await given.user()

    build, _ = await builds.create_upload_link(application, developer, "app.apk", 90, None)

    assert build.uploaded_by == developer.id


async def test_a_quota_of_zero_means_no_quota(
    builds: BuildService,
    application: ApplicationRecord,
    owner: User,
    given: Given,
    settings: Settings,
) -> None:
    settings.quota_bytes_free = 0
    await given.build(application, owner, b"x" * 200, status=BuildStatus.READY)

    build, _ = await builds.create_upload_link(application, owner, "a.apk", 500, None)

    assert build.status is BuildStatus.PENDING


# -- step 3: verify -----------------------------------------------------------------------------


async def test_verify_makes_the_build_ready_with_the_stored_bytes_hash(
    builds: BuildService,
    application: ApplicationRecord,
    owner: User,
    given: Given,
    clock: FrozenClock,
) -> None:
    pending = await given.build(application, owner, DATA, stored=True)

    build = await builds.verify(application, pending.id, "first beta", by=OPERATOR)

    assert build.status is BuildStatus.READY
    assert build.sha256 == hashlib.sha256(DATA).hexdigest()
    assert (build.notes, build.verified_at) == ("first beta", clock.now())


async def test_verify_without_bytes_is_upload_incomplete_and_can_be_retried_once_they_arrive(
    builds: BuildService,
    application: ApplicationRecord,
    owner: User,
    given: Given,
    db: AsyncSession,
) -> None:
    pending = await given.build(application, owner, DATA)
    build_id, key, application_id = pending.id, pending.storage_key, application.id

    with raises(ValidationFailed, "upload_incomplete") as caught:
        await builds.verify(application, build_id, None, by=OPERATOR)
    assert "No bytes have arrived" in caught.value.detail
    # The request fails: its hold on the object goes with its rollback (which also expires
    # the objects it had loaded; the next request loads its own).
    await finish(db, ok=False)

    await given.bytes(key, DATA)
    application = APPLICATION.of_entity(await db.get_one(Application, application_id))
    assert (
        await builds.verify(application, build_id, None, by=OPERATOR)
    ).status is BuildStatus.READY


async def test_verify_of_fewer_bytes_than_declared_is_upload_incomplete(
    builds: BuildService,
    application: ApplicationRecord,
    owner: User,
    given: Given,
    db: AsyncSession,
) -> None:
    pending = await given.build(application, owner, DATA)
    await given.bytes(pending.storage_key, DATA[:-1])

    with raises(ValidationFailed, "upload_incomplete") as caught:
        await builds.verify(application, pending.id, None, by=OPERATOR)

    assert f"{len(DATA) - 1} of the declared {len(DATA)} bytes" in caught.value.detail
    assert (await builds.reads.get(application.id, pending.id)).status is BuildStatus.PENDING


async def test_verify_of_bytes_other_than_the_declared_checksum_is_checksum_mismatch(
    builds: BuildService, application: ApplicationRecord, owner: User, given: Given
) -> None:
    declared = hashlib.sha256(b"something else").hexdigest()
    pending = await given.build(application, owner, DATA, expected_sha256=declared, stored=True)

    with raises(ValidationFailed, "checksum_mismatch"):
        await builds.verify(application, pending.id, None, by=OPERATOR)

    assert (await builds.reads.get(application.id, pending.id)).status is BuildStatus.PENDING


async def test_verify_of_another_apps_build_is_bundle_id_mismatch(
    builds: BuildService, owner: User, given: Given
) -> None:
    project = await given.project(owner)
    application = await given.application(project, bundle_id="com.example.other")
    pending = await given.build(application, owner, IPA, file_name="Example.ipa", stored=True)

    with raises(ValidationFailed, "bundle_id_mismatch") as caught:
        await builds.verify(application, pending.id, None, by=OPERATOR)

    assert INFO["CFBundleIdentifier"] in caught.value.detail
    assert (await builds.reads.get(application.id, pending.id)).status is BuildStatus.PENDING


async def test_the_first_ready_build_names_an_application_without_a_bundle_id(
    builds: BuildService,
    application: ApplicationRecord,
    owner: User,
    given: Given,
    db: AsyncSession,
) -> None:
    pending = await given.build(application, owner, IPA, file_name="Example.ipa", stored=True)

    await builds.verify(application, pending.id, None, by=OPERATOR)

    stored = await db.get(Application, application.id)
    assert stored is not None
    assert (stored.bundle_id, stored.platform) == ("com.example.app", Platform.IOS)


async def test_verify_again_answers_the_verified_build_unchanged(
    builds: BuildService,
    application: ApplicationRecord,
    owner: User,
    given: Given,
    db: AsyncSession,
    clock: FrozenClock,
    settings: Settings,
    storage: LocalStorage,
) -> None:
    pending = await given.build(application, owner, DATA, stored=True)
    first = await builds.verify(application, pending.id, "first", by=OPERATOR)
    await finish(db, ok=True)
    clock.advance(minutes=1)

    again = await BuildService(db, clock.now(), settings, storage, builds.readers).verify(
        application, pending.id, "second", by=OPERATOR
    )

    assert again.id == first.id
    assert (again.notes, again.verified_at, again.sha256) == (
        "first",
        first.verified_at,
        first.sha256,
    )


async def test_verify_of_an_unknown_build_is_build_not_found(
    builds: BuildService, application: ApplicationRecord
) -> None:
    with raises(NotFound, "build_not_found"):
        await builds.verify(application, "bld_01JZZZZZZZZZZZZZZZZZZZZZZZ", None, by=OPERATOR)


async def test_a_build_of_another_application_is_not_found_in_this_one(
    builds: BuildService, application: ApplicationRecord, owner: User, given: Given
) -> None:
    other = await given.application(await given.project(owner))
    elsewhere = await given.build(other, owner, DATA, stored=True)

    with raises(NotFound, "build_not_found"):
        await builds.verify(application, elsewhere.id, None, by=OPERATOR)


# -- reading and deleting -----------------------------------------------------------------------


async def test_a_pending_build_has_no_download_address(
    builds: BuildService, application: ApplicationRecord, owner: User, given: Given
) -> None:
    pending = await given.build(application, owner, DATA, stored=True)

    with raises(Conflict, "build_not_ready"):
        await builds.reads.download_url(application.id, pending.id)


async def test_a_deleted_builds_bytes_go_only_once_the_delete_has_committed(
    builds: BuildService,
    application: ApplicationRecord,
    owner: User,
    given: Given,
    db: AsyncSession,
    storage: LocalStorage,
) -> None:
    build = await given.build(application, owner, DATA, status=BuildStatus.READY)

    await builds.delete(application, build.id, owner)
    await db.flush()

    assert await storage.stat(build.storage_key) is not None  # not before the commit
    await finish(db, ok=True)
    assert await storage.stat(build.storage_key) is None
    assert await db.get(Build, build.id) is None


async def test_a_build_delete_that_rolls_back_keeps_the_bytes(
    builds: BuildService,
    application: ApplicationRecord,
    owner: User,
    given: Given,
    db: AsyncSession,
    storage: LocalStorage,
) -> None:
    build = await given.build(application, owner, DATA, status=BuildStatus.READY)
    build_id, key = build.id, build.storage_key

    await builds.delete(application, build_id, owner)
    await db.flush()
    await finish(db, ok=False)

    assert await storage.stat(key) is not None
    assert await db.get(Build, build_id) is not None

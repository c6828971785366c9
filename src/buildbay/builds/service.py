"""Builds and the three-step upload: upload-link, PUT the bytes, verify.

A build is `pending` from its upload link until verify has checked the stored bytes, and only
then `ready`. A crash at any point leaves a pending build (swept once its link has expired) or a
ready one whose bytes were checked; never a ready build without its bytes.
"""

from __future__ import annotations

import asyncio
import functools
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import IO, TYPE_CHECKING, Any

from sqlalchemy import ColumnElement, String, and_, bindparam, cast, func, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.applications.models import Application, Platform
from buildbay.auth.models import User
from buildbay.builds.metadata import Reading, read_metadata
from buildbay.builds.models import Build, BuildIcon, BuildStatus
from buildbay.config import Settings
from buildbay.db.engine import EntityColumns, FastSelect, read_rows
from buildbay.errors import Conflict, NotFound, PayloadTooLarge, ValidationFailed
from buildbay.ids import new_id, split_page
from buildbay.numbers import whole_number
from buildbay.storage.base import Storage, UploadTarget

if TYPE_CHECKING:
    from buildbay.deps import AppContext

METADATA_SECONDS = 30  # to read what a build says about itself; past it, no metadata


class BuildOrder(StrEnum):
    NEWEST = "newest"
    VERSION = "version"


@dataclass(frozen=True, slots=True)
class VersionFilter:
    """`?versionName=` and `?versionCode=`: an APK's own fields, or for an .ipa its
    CFBundleShortVersionString (`shortVersion`) and CFBundleVersion (`buildNumber`)."""

    name: str | None = None
    code: str | None = None


def _version_clauses(version: VersionFilter | None) -> list[ColumnElement[bool]]:
    if version is None:
        return []
    clauses = []
    for wanted, keys in (
        (version.name, ("versionName", "shortVersion")),
        (version.code, ("versionCode", "buildNumber")),
    ):
        if wanted is not None:
            # As text on both databases (an APK's versionCode is a number in the JSON).
            clauses.append(
                or_(*(cast(Build.metadata_[key].as_string(), String) == wanted for key in keys))
            )
    return clauses


def _version_code(metadata: dict[str, Any]) -> int | None:
    """A build's version as a number to sort by: versionCode, or a whole-number buildNumber."""
    code = metadata.get("versionCode")
    if isinstance(code, int):
        return code
    build_number = metadata.get("buildNumber")
    return whole_number(build_number) if isinstance(build_number, str) else None


def human_size(size: int) -> str:
    """`812 bytes`, `8.5 KiB`, `1 GiB`: one decimal at most."""
    value = float(size)
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            if unit == "bytes":
                return f"{size} bytes"
            return f"{value:.1f}".removesuffix(".0") + f" {unit}"
        value /= 1024
    return f"{size} bytes"


@dataclass(frozen=True, slots=True)
class StorageUsage:
    bytes: int
    builds: int


async def storage_usage(db: AsyncSession, user_id: str) -> StorageUsage:
    """What a user's builds take: every build they uploaded, pending ones included (their
    declared size is reserved from the upload link on)."""
    row = (
        await db.execute(
            select(func.coalesce(func.sum(Build.file_size), 0), func.count(Build.id)).where(
                Build.uploaded_by == user_id
            )
        )
    ).one()
    return StorageUsage(int(row[0]), int(row[1]))


# Built once: composing a statement per request costs more than the database takes to run it.
_BUILD_OF_APPLICATION = select(Build).where(
    Build.id == bindparam("build_id"), Build.application_id == bindparam("application_id")
)
# What read-only requests run instead: no ORM loading, no transaction (see FastSelect); the
# builds come back as transient objects (see EntityColumns).
_builds = Build.__table__
_BUILD = EntityColumns(Build, "")
_READ_BUILD = FastSelect(
    select(*_BUILD.columns).where(
        _builds.c.id == bindparam("build_id"),
        _builds.c.application_id == bindparam("application_id"),
    )
)


@functools.cache
def _newest_builds(*, of_status: bool, after: bool) -> FastSelect:
    """A page of an application's builds, newest first: the list as clients poll it."""
    query = select(*_BUILD.columns).where(_builds.c.application_id == bindparam("application_id"))
    if of_status:
        query = query.where(_builds.c.status == bindparam("status", type_=String))
    if after:
        query = query.where(_builds.c.id < bindparam("after_id"))
    return FastSelect(query.order_by(_builds.c.id.desc()).limit(bindparam("limit")))


def _not_in_application() -> NotFound:
    return NotFound("No build with this id in the application", code="build_not_found")


class BuildService:
    @classmethod
    def of(cls, ctx: AppContext, db: AsyncSession) -> BuildService:
        """The request's build service, from the app's context."""
        return cls(db, ctx.clock.now(), ctx.settings, ctx.storage)

    def __init__(
        self, db: AsyncSession, now: datetime, settings: Settings, storage: Storage
    ) -> None:
        self.db = db
        self.now = now
        self.settings = settings
        self.storage = storage

    # -- step 1: upload link -----------------------------------------------------------------------

    async def create_upload_link(
        self,
        application: Application,
        uploader: User,
        file_name: str,
        file_size: int,
        sha256: str | None,
    ) -> tuple[Build, UploadTarget]:
        largest = self.settings.max_upload_bytes(uploader.plan)
        if file_size > largest:
            raise PayloadTooLarge(
                f"fileSize {file_size} is above the {uploader.plan.value} plan's largest build "
                f"file ({largest} bytes, {human_size(largest)})",
                code="file_too_large",
            )
        await self._check_quota(uploader, file_size)
        build_id = new_id("bld")
        build = Build(
            id=build_id,
            project_id=application.project_id,
            application_id=application.id,
            file_name=file_name,
            file_size=file_size,
            expected_sha256=sha256,
            sha256=None,
            status=BuildStatus.PENDING,
            notes=None,
            storage_key=f"{application.project_id}/{application.id}/{build_id}",
            uploaded_by=uploader.id,
            metadata_=None,
            created_at=self.now,
            expires_at=self.now + timedelta(seconds=self.settings.upload_link_ttl_seconds),
            verified_at=None,
        )
        self.db.add(build)
        await self.db.flush()
        target = await self.storage.upload_target(
            build.storage_key, file_size, build.expires_at, sha256
        )
        return build, target

    async def _check_quota(self, uploader: User, file_size: int) -> None:
        quota = self.settings.storage_quota(uploader.plan)
        if quota is None:
            return
        # On PostgreSQL the uploader's row is locked until the link is committed, so two
        # concurrent links cannot both fit in the last free bytes (SQLite ignores FOR UPDATE).
        await self.db.execute(select(User.id).where(User.id == uploader.id).with_for_update())
        used = (await storage_usage(self.db, uploader.id)).bytes
        if used + file_size > quota:
            raise PayloadTooLarge(
                f"This build ({file_size} bytes) would take your storage to {used + file_size} "
                f"bytes, past the {uploader.plan.value} plan's {quota} bytes "
                f"({human_size(quota)}); delete builds or set a retention rule",
                code="quota_exceeded",
            )

    # -- step 2 happens at the storage address; this is what it asks before taking bytes -----------

    async def pending_upload(self, storage_key: str) -> Build:
        build = await self.db.scalar(select(Build).where(Build.storage_key == storage_key))
        if build is None:
            raise NotFound("This build no longer exists", code="build_not_found")
        if build.status is BuildStatus.READY:
            raise Conflict(
                "This build is already verified; its bytes cannot change",
                code="build_already_verified",
            )
        return build

    # -- step 3: verify ----------------------------------------------------------------------------

    async def verify(self, application: Application, build_id: str, notes: str | None) -> Build:
        build = await self.get(application, build_id)
        if build.status is BuildStatus.READY:
            return build  # verify is safe to retry
        # Under the object's guard, and committed before it is let go: an upload that is still
        # streaming either lands before the check or finds the build ready and is refused.
        async with self.storage.guard(build.storage_key):
            sha256, version = await self._checked_bytes(build)
            reading = await self._metadata(build, version)
            metadata = reading.metadata or {}
            identity = metadata.get("bundleId") or metadata.get("packageName")
            if identity and application.bundle_id and identity != application.bundle_id:
                raise ValidationFailed(
                    f"This build is {identity}; the application is {application.bundle_id}",
                    code="bundle_id_mismatch",
                )
            # Conditional: of two concurrent verifies one makes the change, both answer the build.
            await self.db.execute(
                update(Build)
                .where(Build.id == build.id, Build.status == BuildStatus.PENDING)
                .values(
                    status=BuildStatus.READY,
                    sha256=sha256,
                    storage_version=version,
                    metadata_=reading.metadata,
                    metadata_error=reading.error,
                    version_code=_version_code(metadata),
                    has_icon=reading.icon_png is not None,
                    notes=notes,
                    verified_at=self.now,
                )
                .execution_options(synchronize_session=False)
            )
            if identity:
                platform = Platform.IOS if "bundleId" in metadata else Platform.ANDROID
                await self._adopt_identity(application, identity, platform)
            if reading.icon_png is not None:
                await self.db.merge(BuildIcon(build_id=build.id, png=reading.icon_png))
            await self.db.commit()
        # Read back what won (ours or a concurrent verify); 404 if deleted meanwhile.
        return await self.get(application, build.id, reload=True)

    async def _metadata(self, build: Build, version: str | None) -> Reading:
        """What the file says about itself, read in a worker thread within METADATA_SECONDS."""
        storage = self.storage

        def open_file() -> IO[bytes]:
            return storage.open_reader(build.storage_key, build.file_size, version)

        try:
            return await asyncio.wait_for(
                asyncio.to_thread(read_metadata, open_file, build.file_name), METADATA_SECONDS
            )
        except TimeoutError:
            return Reading(error=f"Reading the file took longer than {METADATA_SECONDS} seconds")

    async def _adopt_identity(
        self, application: Application, bundle_id: str, platform: Platform
    ) -> None:
        """An application without a bundle id takes its first ready build's (an .ipa's bundle
        id, an .apk's or .aab's package name), and its platform if that is unset."""
        await self.db.execute(
            update(Application)
            .where(Application.id == application.id, Application.bundle_id.is_(None))
            .values(bundle_id=bundle_id)
            .execution_options(synchronize_session=False)
        )
        await self.db.execute(
            update(Application)
            .where(Application.id == application.id, Application.platform == Platform.OTHER)
            .values(platform=platform)
            .execution_options(synchronize_session=False)
        )

    async def _checked_bytes(self, build: Build) -> tuple[str, str | None]:
        """The stored bytes' SHA-256 (and storage version), once they are all there and match
        what was declared."""
        info = await self.storage.stat(build.storage_key)
        if info is None:
            raise ValidationFailed(
                "No bytes have arrived for this build; PUT the file to its uploadUrl first",
                code="upload_incomplete",
            )
        if info.size != build.file_size:
            raise ValidationFailed(
                f"The stored file has {info.size} of the declared {build.file_size} bytes",
                code="upload_incomplete",
            )
        sha256 = info.sha256 or await self.storage.compute_sha256(build.storage_key, info.version)
        if build.expected_sha256 is not None and sha256 != build.expected_sha256:
            raise ValidationFailed(
                f"The stored bytes have sha256 {sha256}, not the declared {build.expected_sha256}",
                code="checksum_mismatch",
            )
        return sha256, info.version

    # -- reading and deleting ----------------------------------------------------------------------

    async def list(
        self,
        application: Application,
        status: BuildStatus | None,
        limit: int,
        after_id: str | None,
        version: VersionFilter | None = None,
        sort: BuildOrder = BuildOrder.NEWEST,
    ) -> tuple[list[Build], str | None]:
        """A page of builds. Without a version filter or order, the builds are transient
        copies, read as FastSelects: the list is what clients poll."""
        if sort is BuildOrder.NEWEST and (version is None or version == VersionFilter()):
            query = _newest_builds(of_status=status is not None, after=after_id is not None)
            params = {
                "application_id": application.id,
                "status": status.value if status is not None else None,
                "after_id": after_id,
                "limit": limit + 1,
            }
            rows = await read_rows(self.db, query, params)
            builds = [_BUILD.of(row) for row in rows]
            return split_page(builds, limit, lambda b: b.id)
        stmt = select(Build).where(
            Build.application_id == application.id, *_version_clauses(version)
        )
        if status is not None:
            stmt = stmt.where(Build.status == status)
        if sort is BuildOrder.VERSION:
            # Highest version code first, builds without one last; the newest first among equals.
            # The cursor is still the last build's id: its version code is looked up here.
            key = func.coalesce(Build.version_code, -1)
            stmt = stmt.order_by(key.desc(), Build.id.desc())
            if after_id is not None:
                after_key = await self.db.scalar(
                    select(func.coalesce(Build.version_code, -1)).where(
                        Build.id == after_id, Build.application_id == application.id
                    )
                )
                if after_key is None:
                    return [], None  # the cursor's build was deleted meanwhile: nothing after it
                stmt = stmt.where(or_(key < after_key, and_(key == after_key, Build.id < after_id)))
        else:
            stmt = stmt.order_by(Build.id.desc())
            if after_id is not None:
                stmt = stmt.where(Build.id < after_id)
        builds = list(await self.db.scalars(stmt.limit(limit + 1)))
        return split_page(builds, limit, lambda b: b.id)

    async def latest(self, application: Application, version: VersionFilter | None) -> Build:
        """The newest ready build (of that version, if asked)."""
        build = await self.db.scalar(
            select(Build)
            .where(
                Build.application_id == application.id,
                Build.status == BuildStatus.READY,
                *_version_clauses(version),
            )
            .order_by(Build.id.desc())
            .limit(1)
        )
        if build is None:
            raise NotFound("No ready build matches", code="build_not_found")
        return build

    async def get(self, application: Application, build_id: str, *, reload: bool = False) -> Build:
        build = await self.db.scalar(
            _BUILD_OF_APPLICATION,
            {"build_id": build_id, "application_id": application.id},
            execution_options={"populate_existing": reload},
        )
        if build is None:
            raise _not_in_application()
        return build

    async def show(self, application: Application, build_id: str) -> Build:
        """A transient copy of the build, for a read-only request; 404 as `get`."""
        params = {"build_id": build_id, "application_id": application.id}
        rows = await read_rows(self.db, _READ_BUILD, params)
        if not rows:
            raise _not_in_application()
        return _BUILD.of(rows[0])

    async def delete(self, application: Application, build_id: str) -> None:
        build = await self.get(application, build_id)
        await self.db.delete(build)
        await self.db.commit()  # the row first: a crash can leave orphan bytes, not a broken build
        await self.storage.delete(build.storage_key)

    async def download_url(self, application: Application, build_id: str) -> str:
        build = await self.get(application, build_id)
        if build.status is not BuildStatus.READY:
            raise Conflict(
                "This build is not verified yet; only ready builds can be downloaded",
                code="build_not_ready",
            )
        return await self.file_url(build)

    async def icon(self, build: Build) -> bytes:
        """The PNG icon the build's file carries; 404 if it has none."""
        png = None
        if build.has_icon:
            png = await self.db.scalar(select(BuildIcon.png).where(BuildIcon.build_id == build.id))
        if png is None:
            raise NotFound("This build's file carries no icon", code="icon_not_found")
        return png

    async def file_url(self, build: Build) -> str:
        """A short-lived signed address of a build's file (the version verify checked)."""
        expires_at = self.now + timedelta(seconds=self.settings.download_link_ttl_seconds)
        return await self.storage.download_url(
            build.storage_key, build.file_name, expires_at, build.storage_version
        )

"""Builds and the three-step upload: upload-link, PUT the bytes, verify.

A build is `pending` from its upload link until verify has checked the stored bytes, and only
then `ready`. A crash at any point leaves a pending build (swept once its link has expired) or a
ready one whose bytes were checked; never a ready build without its bytes.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import IO, TYPE_CHECKING, Any

from sqlalchemy import delete, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.applications.models import Application, Platform
from buildbay.applications.reads import ApplicationRecord
from buildbay.auth.models import User
from buildbay.builds.metadata import Reading, read_metadata
from buildbay.builds.models import Build, BuildIcon, BuildStatus
from buildbay.builds.reads import BUILD, BuildReads, BuildRecord, storage_usage
from buildbay.channels.service import ChannelService
from buildbay.config import Settings
from buildbay.db.engine import after_commit, hold_until_ended
from buildbay.db.reads import Reads
from buildbay.errors import PayloadTooLarge, ValidationFailed
from buildbay.ids import new_id
from buildbay.numbers import whole_number
from buildbay.storage.base import Storage, UploadTarget
from buildbay.webhooks import events as webhook_events

if TYPE_CHECKING:
    from buildbay.context import AppContext

METADATA_SECONDS = 30  # to read what a build says about itself; past it, no metadata


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
        self.public_url = settings.resolved_public_url
        # What it reads, it reads as any reader does, inside its transaction.
        self.reads = BuildReads(Reads.within(db), now, settings, storage)

    # -- step 1: upload link -----------------------------------------------------------------------

    async def create_upload_link(
        self,
        application: ApplicationRecord,
        uploader: User,
        file_name: str,
        file_size: int,
        sha256: str | None,
    ) -> tuple[BuildRecord, UploadTarget]:
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
        return BUILD.of_entity(build), target

    async def _check_quota(self, uploader: User, file_size: int) -> None:
        quota = self.settings.storage_quota(uploader.plan)
        if quota is None:
            return
        # On PostgreSQL the uploader's row is locked until the link is committed, so two
        # concurrent links cannot both fit in the last free bytes (SQLite ignores FOR UPDATE).
        await self.db.execute(select(User.id).where(User.id == uploader.id).with_for_update())
        used = (await storage_usage(self.reads.reads, uploader.id)).bytes
        if used + file_size > quota:
            raise PayloadTooLarge(
                f"This build ({file_size} bytes) would take your storage to {used + file_size} "
                f"bytes, past the {uploader.plan.value} plan's {quota} bytes "
                f"({human_size(quota)}); delete builds or set a retention rule",
                code="quota_exceeded",
            )

    # -- step 3: verify ----------------------------------------------------------------------------

    async def verify(
        self,
        application: ApplicationRecord,
        build_id: str,
        notes: str | None,
        channels: list[str] | None = None,
        mandatory: bool = False,
    ) -> BuildRecord:
        """`channels`: the release channels to publish it to (None: `default`)."""
        build = await self.reads.get(application.id, build_id)
        if build.status is BuildStatus.READY:
            return build  # verify is safe to retry
        channel_service = ChannelService(self.db, self.now)
        await channel_service.check_names(application.id, channels)  # before the file's work
        # Under the object's guard, let go only once the request's unit of work has committed:
        # an upload that is still streaming either lands before the check or finds the build
        # ready and is refused.
        await hold_until_ended(self.db, self.storage.guard(build.storage_key))
        sha256, version = await self._checked_bytes(build)
        reading = await self._metadata(build, version)
        if reading.refused is not None:
            raise ValidationFailed(reading.refused, code="unreadable_build")
        metadata = reading.metadata or {}
        identity = metadata.get("bundleId") or metadata.get("packageName")
        if identity and application.bundle_id and identity != application.bundle_id:
            raise ValidationFailed(
                f"This build is {identity}; the application is {application.bundle_id}",
                code="bundle_id_mismatch",
            )
        # Conditional: of two concurrent verifies one makes the change, both answer the build.
        verified = await self.db.execute(
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
                mandatory=mandatory,
                notes=notes,
                verified_at=self.now,
            )
            .execution_options(synchronize_session=False)
        )
        # The one that made the change does the rest; the other would add the icon twice.
        if verified.rowcount:  # type: ignore[attr-defined]
            if identity:
                platform = Platform.IOS if "bundleId" in metadata else Platform.ANDROID
                await self._adopt_identity(application, identity, platform)
            if reading.icon_png is not None:
                await self.db.merge(BuildIcon(build_id=build.id, png=reading.icon_png))
            await channel_service.publish(application.id, build.id, channels, replace=False)
        # Read back what won (ours or a concurrent verify); 404 if deleted meanwhile.
        ready = await self.reads.get(application.id, build.id)
        if verified.rowcount:  # type: ignore[attr-defined]
            await webhook_events.build_ready(self.db, ready, self.public_url, self.now)
        return ready

    async def _metadata(self, build: BuildRecord, version: str | None) -> Reading:
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
        self, application: ApplicationRecord, bundle_id: str, platform: Platform
    ) -> None:
        """An application without a bundle id takes its first ready build's (an .ipa's bundle
        id, an .apk's or .aab's package name), and its platform if that is unset.

        The check before it saw no bundle id, but a build verified meanwhile may have given it
        one: the update is conditional, and if it changed nothing, the bundle id it found must
        be this one. (On PostgreSQL a concurrent adoption holds the row until it commits; the
        update then finds the bundle id set, and the read after it sees which.)
        """
        adopted = await self.db.execute(
            update(Application)
            .where(Application.id == application.id, Application.bundle_id.is_(None))
            .values(bundle_id=bundle_id)
            .execution_options(synchronize_session=False)
        )
        if not adopted.rowcount:  # type: ignore[attr-defined]
            current = await self.db.scalar(
                select(Application.bundle_id).where(Application.id == application.id)
            )
            if current is not None and current != bundle_id:
                raise ValidationFailed(
                    f"This build is {bundle_id}; the application is {current}",
                    code="bundle_id_mismatch",
                )
        await self.db.execute(
            update(Application)
            .where(Application.id == application.id, Application.platform == Platform.OTHER)
            .values(platform=platform)
            .execution_options(synchronize_session=False)
        )

    async def _checked_bytes(self, build: BuildRecord) -> tuple[str, str | None]:
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

    # -- publishing -------------------------------------------------------------------------------

    async def set_channels(
        self, application: ApplicationRecord, build_id: str, channels: list[str]
    ) -> BuildRecord:
        """Publish the build to these channels only (a pending build too: it is offered once
        it is ready)."""
        build = await self.reads.get(application.id, build_id)
        await ChannelService(self.db, self.now).publish(
            application.id, build.id, channels, replace=True
        )
        return build

    async def set_mandatory(
        self, application: ApplicationRecord, build_id: str, mandatory: bool
    ) -> BuildRecord:
        build = await self.reads.get(application.id, build_id)
        await self.db.execute(
            update(Build)
            .where(Build.id == build.id)
            .values(mandatory=mandatory)
            .execution_options(synchronize_session=False)
        )
        return await self.reads.get(application.id, build.id)

    # -- deleting ----------------------------------------------------------------------------------

    async def delete(self, application: ApplicationRecord, build_id: str) -> None:
        build = await self.reads.get(application.id, build_id)
        await webhook_events.build_deleted(self.db, build, self.public_url, self.now)
        # Its icon and install links go with it (ON DELETE CASCADE).
        await self.db.execute(delete(Build).where(Build.id == build.id))
        # The row first: a crash can leave orphan bytes (the sweeper's), never a broken build.
        storage, key = self.storage, build.storage_key
        after_commit(self.db, lambda: storage.delete(key))

"""Builds and the three-step upload: upload-link, PUT the bytes, verify.

A build is `pending` from its upload link until verify has checked the stored bytes, and only
then `ready`. A crash at any point leaves a pending build (swept once its link has expired) or a
ready one whose bytes were checked; never a ready build without its bytes.

A large build is uploaded in parts (`multipart`): step 2 is then one PUT per part, to addresses
asked for a batch at a time, in any order and as often as needed; verify joins the parts. A
file too large to hash within a request is checked by a job (`VERIFY_JOB`): the build is
`processing` meanwhile, then `ready` or `failed`. Either way a build becomes ready in one place,
`mark_ready`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import IO, Any, TypeVar

from sqlalchemy import delete, insert, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.applications.enums import Platform, VersionPolicy
from buildbay.applications.models import Application
from buildbay.applications.records import ApplicationRecord
from buildbay.audit.record import Actor, ActorKind, AuditAction
from buildbay.auth.models import User
from buildbay.auth.reads import UserRecord
from buildbay.builds.audited import record_build
from buildbay.builds.blockmap import CONTENT_TYPE as BLOCKMAP_TYPE
from buildbay.builds.blockmap import blockmap_key, check_blockmap
from buildbay.builds.duplicates import (
    duplicate_build,
    ready_build_of_bytes,
    ready_build_of_version,
    version_code_of,
    version_exists,
)
from buildbay.builds.enums import BuildStatus, OnDuplicate, RemovalReason
from buildbay.builds.install import InstallLinkRecord
from buildbay.builds.metadata import (
    DESKTOP_FILES,
    PLATFORM_FILES,
    Reading,
    a_platform,
    suffix_of,
    unreadable_problem,
    wrong_platform_problem,
)
from buildbay.builds.models import Build, BuildIcon
from buildbay.builds.readers import MetadataReaders
from buildbay.builds.reads import BUILD, BuildReads, storage_usage
from buildbay.builds.records import BuildRecord
from buildbay.builds.removed import record_removals
from buildbay.builds.source import BuildSource
from buildbay.builds.updaters import UpdaterFields, needs_sha512, with_fields
from buildbay.channels.service import ChannelService
from buildbay.config import Settings
from buildbay.db.concurrency import lock_row
from buildbay.db.engine import after_commit, connection_released, hold_until_ended
from buildbay.db.reads import Reads
from buildbay.devices.models import BuildProfileDevice
from buildbay.distribution.installs import record as record_install
from buildbay.distribution.models import EVERYONE, InstallEventKind
from buildbay.distribution.service import distribute_when_ready
from buildbay.distribution.visibility import Viewer
from buildbay.errors import BuildbayError, Conflict, PayloadTooLarge, ValidationFailed
from buildbay.feedback.removal import remove_screenshots, screenshots_of_builds
from buildbay.ids import new_id
from buildbay.jobs.queue import enqueue
from buildbay.storage.base import (
    MAX_PARTS,
    MIN_PART_SIZE,
    Storage,
    UploadGone,
    UploadTarget,
    part_bounds,
    parts_count,
)
from buildbay.webhooks import events as webhook_events

VERIFY_JOB = "builds.verify"  # checks a large multipart build's bytes in the background
# A verify checks the bytes again when an upload replaced them while they were read, this many
# times at most (then 409 `upload_changing`).
CHECKS_WHILE_REPLACED = 3
MiB = 1024 * 1024
SINGLE_PUT_MAX = 5 * 1024 * MiB  # one S3 PUT takes at most 5 GiB: above it, parts
MIN_PART = 8 * MiB
MAX_PART = 64 * MiB  # unless the file needs larger parts to fit in MAX_PARTS
TARGET_PARTS = 64
PARTS_PER_REQUEST = 100  # part addresses handed out by one request


def part_size_for(file_size: int) -> int:
    """The part size the server picks, in whole MiB: about TARGET_PARTS parts, so that each
    part's request costs little next to its bytes, but between MIN_PART and MAX_PART, so that
    a part sent again costs little too; larger only where MAX_PARTS parts need it."""
    wanted = min(max(-(-file_size // TARGET_PARTS), MIN_PART), MAX_PART)
    least = -(-file_size // MAX_PARTS)
    return -(-max(wanted, least) // MiB) * MiB


class Duplicate(Exception):
    """mark_ready found a ready build of the same bytes; `problem` names it."""

    def __init__(self, problem: Conflict) -> None:
        super().__init__(problem.detail)
        self.problem = problem


class VersionTaken(Exception):
    """mark_ready found a ready build of the same version code under a `unique` policy."""

    def __init__(self, problem: Conflict) -> None:
        super().__init__(problem.detail)
        self.problem = problem


E = TypeVar("E", bound=BuildbayError)


@dataclass(frozen=True, slots=True)
class CheckedFile:
    """A build's stored bytes once verify has checked them: their digests and storage version,
    what the file says (with what verify's fields add), and the desktop updaters' facts."""

    sha256: str
    sha512: str | None  # base64; a desktop application's build's (updaters.needs_sha512)
    version: str | None
    reading: Reading
    architecture: str | None = None
    sparkle_ed_signature: str | None = None


@dataclass(frozen=True, slots=True)
class PartTarget:
    number: int
    target: UploadTarget
    expires_at: datetime


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
    def __init__(
        self,
        db: AsyncSession,
        now: datetime,
        settings: Settings,
        storage: Storage,
        readers: MetadataReaders,
    ) -> None:
        self.db = db
        self.now = now
        self.settings = settings
        self.storage = storage
        self.readers = readers
        self.public_url = settings.resolved_public_url
        # What it reads, it reads as any reader does, inside its transaction.
        self.reads = BuildReads(Reads.within(db), now, settings, storage)

    # -- step 1: upload link -----------------------------------------------------------------------

    async def create_upload_link(
        self,
        application: ApplicationRecord,
        uploader: UserRecord,
        file_name: str,
        file_size: int,
        sha256: str | None,
        multipart: bool = False,
        on_duplicate: OnDuplicate = OnDuplicate.REFUSE,
    ) -> tuple[BuildRecord, UploadTarget | None]:
        """A pending build, and where to PUT its file; for a `multipart` upload no address yet
        (`part_targets` gives one per part).

        A declared `sha256` that a ready build of the application has is a duplicate, told
        before any byte is sent: 409 `duplicate_build`, or with `on_duplicate` REUSE that
        ready build itself, without an address (the one answer whose build is not pending)."""
        if problem := wrong_platform_problem(application.platform, file_name):
            raise ValidationFailed(problem, code="wrong_platform")
        if sha256 is not None:  # before the size and quota: a duplicate takes no room
            existing = await ready_build_of_bytes(self.reads.reads, application.id, sha256)
            if existing is not None:
                if on_duplicate is OnDuplicate.REUSE:
                    return existing, None
                raise duplicate_build(existing, reuse_hint=True)
        largest = self.settings.max_upload_bytes(uploader.plan)
        if file_size > largest:
            raise PayloadTooLarge(
                f"This file ({human_size(file_size)}) is larger than the {uploader.plan.value} "
                f"plan's largest build file ({human_size(largest)})",
                code="file_too_large",
            )
        if multipart and file_size < MIN_PART_SIZE:
            raise ValidationFailed.for_field(
                "multipart",
                f"a file under {human_size(MIN_PART_SIZE)} is uploaded in one PUT",
                code="multipart_too_small",
            )
        if not multipart and file_size > SINGLE_PUT_MAX:
            raise ValidationFailed.for_field(
                "multipart",
                f"a file over {human_size(SINGLE_PUT_MAX)} must be uploaded in parts: ask for "
                '"multipart": true',
                code="multipart_required",
            )
        await self._check_quota(uploader, file_size)
        ttl = (
            self.settings.multipart_upload_ttl_seconds
            if multipart
            else self.settings.upload_link_ttl_seconds
        )
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
            expires_at=self.now + timedelta(seconds=ttl),
            verified_at=None,
            part_size=part_size_for(file_size) if multipart else None,
        )
        self.db.add(build)
        await self.db.flush()
        if build.part_size is not None:
            # After the row: an upload begun for a link that is then rolled back is one no
            # build owns, which the sweeper aborts.
            build.upload_id = await self.storage.start_multipart(
                build.storage_key, file_size, build.part_size
            )
            await self.db.flush()
            return BUILD.of_entity(build), None
        target = await self.storage.upload_target(
            build.storage_key, file_size, build.expires_at, sha256
        )
        return BUILD.of_entity(build), target

    # -- step 2 of a multipart upload: an address per part ----------------------------------------

    async def part_targets(
        self, application: ApplicationRecord, build_id: str, numbers: list[int]
    ) -> list[PartTarget]:
        """A signed PUT address for each part asked for, valid for an upload link's time (and
        no longer than the upload)."""
        build = self.reads.uploading_in_parts(await self.reads.get(application.id, build_id))
        assert build.part_size is not None
        assert build.upload_id is not None
        count = parts_count(build.file_size, build.part_size)
        wrong = [n for n in numbers if not 1 <= n <= count]
        if wrong:
            raise ValidationFailed.for_field(
                "partNumbers", f"this upload has parts 1 to {count}; not {wrong[0]}"
            )
        if build.expires_at <= self.now:
            raise Conflict(
                "This upload has expired; ask for a new upload link", code="upload_expired"
            )
        expires_at = min(
            build.expires_at, self.now + timedelta(seconds=self.settings.upload_link_ttl_seconds)
        )
        targets = []
        for number in dict.fromkeys(numbers):  # each once, in the order asked
            size = part_bounds(number, build.part_size, build.file_size)[1]
            target = await self.storage.part_target(
                build.storage_key, build.upload_id, number, size, expires_at
            )
            targets.append(PartTarget(number, target, expires_at))
        return targets

    async def _check_quota(self, uploader: UserRecord, file_size: int) -> None:
        quota = self.settings.storage_quota(uploader.plan)
        if quota is None:
            return
        # On PostgreSQL the uploader's row is locked until the link is committed, so two
        # concurrent links cannot both fit in the last free bytes (SQLite ignores FOR UPDATE).
        await self.db.execute(select(User.id).where(User.id == uploader.id).with_for_update())
        used = (await storage_usage(self.reads.reads, uploader.id, self.now)).bytes
        if used + file_size > quota:
            raise PayloadTooLarge(
                f"This build ({human_size(file_size)}) would take your storage to "
                f"{human_size(used + file_size)}, past the {uploader.plan.value} plan's "
                f"{human_size(quota)}; delete builds or set a retention rule",
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
        updater: UpdaterFields | None = None,
        source: BuildSource | None = None,
        *,
        by: Actor,
    ) -> BuildRecord:
        """`by`: who verifies it (the audit log's `build.uploaded`). `channels`: the release
        channels to publish it to (None: `default`, if the build
        goes to everyone: ChannelService.publish_verified). `updater`: what the desktop
        updaters need that only CI knows (builds/updaters.py). `source`: where the build came
        from (builds/source.py), kept with it.

        A multipart build's parts are joined first; if it is larger than
        `verify_inline_max_bytes` its check is left to a job and the build answered is
        `processing`."""
        build = await self.reads.get(application.id, build_id)
        if build.status in (BuildStatus.READY, BuildStatus.PROCESSING):
            return build  # verify is safe to retry
        if build.status is BuildStatus.FAILED:
            raise ValidationFailed(
                build.metadata_error or "This build's bytes were refused",
                code=build.failure_code or "upload_refused",
            )
        channel_service = ChannelService(self.db, self.now)
        await channel_service.check_names(application.id, channels)  # before the file's work
        try:
            if build.multipart:
                await self._join_parts(build)
                if build.file_size > self.settings.verify_inline_max_bytes:
                    return await self._verify_later(
                        build, notes, channels, mandatory, updater, source
                    )
            checked = await self._checked_bytes_under_guard(application, build, updater)
        except ValidationFailed as refused:
            if build.multipart and refused.code == "checksum_mismatch":
                await self._reopen_parts(build)
            raise await self._refused(build, refused) from None
        try:
            return await self.mark_ready(
                application, build, checked, notes, channels, mandatory, source, by=by
            )
        except Duplicate as found:
            raise await self._dropped(build, found.problem) from None
        except VersionTaken as taken:
            raise await self._refused(build, taken.problem) from None

    async def _checked_bytes_under_guard(
        self, application: ApplicationRecord, build: BuildRecord, updater: UpdaterFields | None
    ) -> CheckedFile:
        """`_checked_file`, then the object's guard, held until the request's unit of work has
        ended, over bytes seen unchanged since they were checked: an upload still streaming
        either landed before (its bytes are checked in turn) or finds the build ready and is
        refused. The guard is taken only once the file is read, not for the seconds a file
        takes to read: its lock stripe is shared with other builds' uploads and verifies."""
        for _ in range(CHECKS_WHILE_REPLACED):
            checked = await self._checked_file(application, build, updater)
            guard = contextlib.AsyncExitStack()
            await guard.enter_async_context(self.storage.guard(build.storage_key))
            now = await self.storage.stat(build.storage_key)
            if (
                now is not None
                and now.version == checked.version
                and now.sha256 in (None, checked.sha256)  # the same bytes
            ):
                await hold_until_ended(self.db, guard)
                return checked
            await guard.aclose()  # replaced while it was read: read what is there now
        raise Conflict(
            "This build's file was replaced again and again while it was checked; verify it "
            "once its upload is over",
            code="upload_changing",
        )

    async def _refused(self, build: BuildRecord, refused: E) -> E:
        """The refusal, kept on the pending build (its `failureCode` and `metadataError` say
        why it is still pending, in the console too) although the request fails."""
        await self.db.execute(
            update(Build)
            .where(Build.id == build.id, Build.status == BuildStatus.PENDING)
            .values(failure_code=refused.code, metadata_error=refused.detail[:500])
            .execution_options(synchronize_session=False)
        )
        refused.keeps_writes = True
        return refused

    async def _dropped(self, build: BuildRecord, duplicate: Conflict) -> Conflict:
        """The refusal of a build that verify found to be a duplicate, which is deleted, row
        and bytes (the bytes once the row's deletion has committed, as `delete` does): the
        deletion stands although the request fails, and no half-state remains."""
        await self.db.execute(delete(Build).where(Build.id == build.id))
        after_commit(self.db, self._bytes_remover(build))
        duplicate.keeps_writes = True
        return duplicate

    def _bytes_remover(self, build: BuildRecord) -> Callable[[], Awaitable[None]]:
        storage, key, upload_id = self.storage, build.storage_key, build.upload_id

        async def remove_bytes() -> None:
            if upload_id is not None:  # a multipart upload not joined yet: its parts go
                await storage.abort_multipart(key, upload_id)
            await storage.delete(key)
            await storage.delete(blockmap_key(key))  # its blockmap, if it has one

        return remove_bytes

    async def _join_parts(self, build: BuildRecord) -> None:
        """Join a multipart upload's parts into the build's object, unless an earlier verify
        did (it then failed later, or its commit was lost). The upload is asked first: while
        it takes parts, an object already under the key is that of an upload refused before
        (`_reopen_parts`), and the parts sent since replace it."""
        assert build.part_size is not None
        assert build.upload_id is not None
        try:
            await self.storage.complete_multipart(
                build.storage_key, build.upload_id, build.file_size, build.part_size
            )
        except UploadGone:
            # An earlier or concurrent verify joined them; or the upload was given up meanwhile.
            info = await self.storage.stat(build.storage_key)
            if info is None or info.size != build.file_size:
                raise

    async def _reopen_parts(self, build: BuildRecord) -> None:
        """The joined parts did not make the declared file: a new upload under the build's
        key takes every part again (`GET .../parts` lists none, the part addresses asked for
        from now on are the new upload's), so the client can send them and verify again. The
        refused bytes stay under the key until the new parts are joined over them."""
        assert build.part_size is not None
        # The row first, still naming the joined upload: of two verifies refused at once, the
        # second finds it changed (once the first has committed) and leaves the first's.
        claimed = await self.db.execute(
            update(Build)
            .where(Build.id == build.id, Build.upload_id == build.upload_id)
            .values(upload_id=build.upload_id)
            .execution_options(synchronize_session=False)
        )
        if not claimed.rowcount:  # type: ignore[attr-defined]
            return
        upload_id = await self.storage.start_multipart(
            build.storage_key, build.file_size, build.part_size
        )
        await self.db.execute(
            update(Build)
            .where(Build.id == build.id)
            .values(upload_id=upload_id)
            .execution_options(synchronize_session=False)
        )

    async def _verify_later(
        self,
        build: BuildRecord,
        notes: str | None,
        channels: list[str] | None,
        mandatory: bool,
        updater: UpdaterFields | None,
        source: BuildSource | None,
    ) -> BuildRecord:
        """The build is `processing` (with its source, shown meanwhile); a job checks its bytes
        and makes it ready or failed."""
        marked = await self.db.execute(
            update(Build)
            .where(Build.id == build.id, Build.status == BuildStatus.PENDING)
            .values(status=BuildStatus.PROCESSING, **(source.columns() if source else {}))
            .execution_options(synchronize_session=False)
        )
        if marked.rowcount:  # type: ignore[attr-defined]
            payload = {
                "buildId": build.id,
                "applicationId": build.application_id,
                "notes": notes,
                "channels": channels,
                "mandatory": mandatory,
                "updater": updater.to_json() if updater is not None else None,
            }
            enqueue(self.db, VERIFY_JOB, payload, self.now)
        return await self.reads.get(build.application_id, build.id)

    async def finish_verify(
        self,
        application: ApplicationRecord,
        build_id: str,
        notes: str | None,
        channels: list[str] | None,
        mandatory: bool,
        updater: UpdaterFields | None = None,
    ) -> BuildRecord | None:
        """The job's side of a `processing` build: check its bytes, then make it ready, or
        `failed` with the reason. None if the build is gone or no longer processing."""
        try:
            build = await self.reads.get(application.id, build_id)
        except BuildbayError:
            return None  # deleted meanwhile
        if build.status is not BuildStatus.PROCESSING:
            return None  # a run before this one finished it
        try:
            checked = await self._checked_file(application, build, updater)
            by = await self._uploader(build)
            return await self.mark_ready(
                application, build, checked, notes, channels, mandatory, by=by
            )
        except ValidationFailed as refused:
            problem: BuildbayError = refused
        except (Duplicate, VersionTaken) as found:
            # No request to answer: the build is `failed`, saying which build it repeats (and
            # swept with its bytes, as every failed build).
            problem = found.problem
        changed = await self.db.execute(
            update(Build)
            .where(Build.id == build.id, Build.status == BuildStatus.PROCESSING)
            .values(
                status=BuildStatus.FAILED,
                failure_code=problem.code,
                metadata_error=problem.detail[:500],
            )
            .execution_options(synchronize_session=False)
        )
        failed = await self.reads.get(application.id, build.id)
        if changed.rowcount:  # type: ignore[attr-defined]
            await webhook_events.build_failed(self.db, failed, self.public_url, self.now)
        return failed

    async def _checked_file(
        self, application: ApplicationRecord, build: BuildRecord, updater: UpdaterFields | None
    ) -> CheckedFile:
        """The stored bytes' digests and version, and what the file says about itself (with
        what verify's `updater` fields add), once they match what was declared and the file
        belongs to the application.

        The unit of work, which has written nothing yet, gives its database connection back
        while the bytes are hashed and read (seconds for a large or crafted file, waiting for a
        reading process included): an account's many verifies at once hold none of the
        connections that everyone else's requests need. What follows writes conditionally."""
        platform = application.platform
        async with connection_released(self.db):
            sha256, sha512, version = await self._checked_bytes(build, platform)
            if problem := wrong_platform_problem(platform, build.file_name):
                raise ValidationFailed(problem, code="wrong_platform")  # the platform changed
            reading = await self._metadata(build, version)
        if reading.refused is not None:
            raise ValidationFailed(reading.refused, code="unreadable_build")
        content = reading.platform  # what the file's contents say, if they could be read
        own_files = platform in PLATFORM_FILES or platform in DESKTOP_FILES
        if own_files and content is not None and content != platform:
            # An application offers its testers only builds their devices can install.
            raise ValidationFailed(
                f"This file is {a_platform(content)} app, and this is {a_platform(platform)} "
                "application",
                code="wrong_platform",
            )
        if problem := unreadable_problem(platform, build.file_name, reading):
            raise ValidationFailed(problem, code="unreadable_build")
        fields = updater or UpdaterFields()
        metadata, architecture = with_fields(reading.metadata, suffix_of(build.file_name), fields)
        identity = (metadata or {}).get("bundleId") or (metadata or {}).get("packageName")
        if identity and application.bundle_id and identity != application.bundle_id:
            raise ValidationFailed(
                f"This build is {identity}; the application is {application.bundle_id}",
                code="bundle_id_mismatch",
            )
        return CheckedFile(
            sha256,
            sha512,
            version,
            dataclasses.replace(reading, metadata=metadata),
            architecture,
            fields.sparkle_ed_signature,
        )

    async def mark_ready(
        self,
        application: ApplicationRecord,
        build: BuildRecord,
        checked: CheckedFile,
        notes: str | None,
        channels: list[str] | None,
        mandatory: bool,
        source: BuildSource | None = None,
        *,
        by: Actor,
    ) -> BuildRecord:
        """Make a checked build `ready` (from `pending`, or `processing` in the background):
        the one place a build becomes ready, so what follows it (a `build.ready` webhook,
        distribution to groups) hooks in here, run only by the call that made the change (of
        two concurrent verifies only one does). Answers the build as it then is, whichever
        verify won (404 if it was deleted meanwhile).

        Raises Duplicate if a ready build of the application has these bytes, VersionTaken if
        one has this version code with other bytes and the application's versions are
        `unique`: decided under the application's row lock, held until the unit of work ends,
        so that of two builds made ready at the same moment the second sees the first."""
        reading = checked.reading
        metadata = reading.metadata or {}
        identity = metadata.get("bundleId") or metadata.get("packageName")
        version_code = version_code_of(metadata)
        await lock_row(self.db, Application.id, application.id)
        await self._check_one_per_binary(application, build, checked.sha256, version_code)
        channel_service = ChannelService(self.db, self.now)
        # Conditional: of two concurrent verifies one makes the change, both answer the build.
        verified = await self.db.execute(
            update(Build)
            .where(
                Build.id == build.id,
                Build.status.in_([BuildStatus.PENDING, BuildStatus.PROCESSING]),
            )
            .values(
                status=BuildStatus.READY,
                sha256=checked.sha256,
                sha512=checked.sha512,
                architecture=checked.architecture,
                sparkle_ed_signature=checked.sparkle_ed_signature,
                storage_version=checked.version,
                metadata_=reading.metadata,
                metadata_error=reading.error,
                failure_code=None,  # an earlier verify's refusal
                version_code=version_code,
                has_icon=reading.icon_png is not None,
                mandatory=mandatory,
                notes=notes,
                verified_at=self.now,
                # None: the source a `processing` build was given at its verify stays.
                **(source.columns() if source is not None else {}),
            )
            .execution_options(synchronize_session=False)
        )
        # The one that made the change does the rest; the other would add the icon twice.
        if verified.rowcount:  # type: ignore[attr-defined]
            if identity and reading.platform is not None:
                await self._adopt_identity(application, identity, Platform(reading.platform))
            if reading.icon_png is not None:
                await self.db.merge(BuildIcon(build_id=build.id, png=reading.icon_png))
            if reading.profile_udids:
                await self.db.execute(
                    insert(BuildProfileDevice),
                    [{"build_id": build.id, "udid": udid} for udid in reading.profile_udids],
                )
            to_everyone = EVERYONE in application.auto_distribute_groups
            await channel_service.publish_verified(
                application.id, build.id, channels, to_everyone=to_everyone
            )
            await distribute_when_ready(self.db, self.now, application, build)
        ready = await self.reads.get(application.id, build.id)
        if verified.rowcount:  # type: ignore[attr-defined]
            await webhook_events.build_ready(self.db, ready, self.public_url, self.now)
            record_build(self.db, self.now, by, AuditAction.BUILD_UPLOADED, ready)
        return ready

    async def _uploader(self, build: BuildRecord) -> Actor:
        """Who uploaded `build`, for a verify finished by a job (no request to say who)."""
        email = None
        if build.uploaded_by is not None:
            email = await self.db.scalar(select(User.email).where(User.id == build.uploaded_by))
        return Actor(ActorKind.USER, build.uploaded_by, email)

    async def _check_one_per_binary(
        self,
        application: ApplicationRecord,
        build: BuildRecord,
        sha256: str,
        version_code: int | None,
    ) -> None:
        """Duplicate or VersionTaken, as mark_ready says (builds/duplicates.py)."""
        reads = self.reads.reads
        existing = await ready_build_of_bytes(reads, application.id, sha256, other_than=build.id)
        if existing is not None:
            raise Duplicate(duplicate_build(existing, reuse_hint=False))
        if version_code is None:
            return
        policy = await self.db.scalar(
            select(Application.version_policy).where(Application.id == application.id)
        )
        if policy is not VersionPolicy.UNIQUE:
            return
        same = await ready_build_of_version(
            reads, application.id, version_code, sha256, other_than=build.id
        )
        if same is not None:
            raise VersionTaken(version_exists(same, version_code))

    async def _metadata(self, build: BuildRecord, version: str | None) -> Reading:
        """What the file says about itself, read by a reading process within its limits
        (builds/readers.py): past one, a Reading whose error says which."""
        storage = self.storage

        def open_file() -> IO[bytes]:
            return storage.open_reader(build.storage_key, build.file_size, version)

        tenants = (f"account:{build.uploaded_by}", f"project:{build.project_id}")
        return await self.readers.read(open_file, build.file_name, tenants)

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

    async def _checked_bytes(
        self, build: BuildRecord, platform: str
    ) -> tuple[str, str | None, str | None]:
        """The stored bytes' SHA-256, SHA-512 (for a desktop application's build:
        updaters.needs_sha512; else as far as the storage knows it) and storage version, once
        they are all there and match what was declared.

        Both digests come from the one read of the bytes that already makes the SHA-256: on
        the way in (a local upload, its parts) or here, where the storage does not know them.
        Where it knows the SHA-256 alone (a bucket told the checksum at the PUT), a desktop
        build's bytes are read for both here."""
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
        sha256, sha512 = info.sha256, info.sha512
        wanted = needs_sha512(platform)
        if sha256 is None or (sha512 is None and wanted):
            digests = await self.storage.compute_digests(build.storage_key, info.version, wanted)
            sha256, sha512 = digests.sha256, digests.sha512
        if build.expected_sha256 is not None and sha256 != build.expected_sha256:
            raise ValidationFailed(
                f"The stored bytes have sha256 {sha256}, not the declared {build.expected_sha256}",
                code="checksum_mismatch",
            )
        return sha256, sha512, info.version

    # -- publishing -------------------------------------------------------------------------------

    async def set_channels(
        self,
        application: ApplicationRecord,
        build_id: str,
        channels: list[str],
        rollouts: dict[str, int] | None = None,
        actor_id: str | None = None,
    ) -> BuildRecord:
        """Publish the build to these channels only (a pending build too: it is offered once
        it is ready), at the rollout percentages asked (by channel name; the others keep
        theirs, a new one starts at 100). `actor_id`: who, for the build's history."""
        build = await self.reads.get(application.id, build_id)
        await ChannelService(self.db, self.now).publish(
            application.id, build.id, channels, replace=True, rollouts=rollouts,
            actor_id=actor_id,
        )  # fmt: skip
        return build

    async def set_rollout(
        self, application: ApplicationRecord, build_id: str, channel: str, percent: int,
        actor_id: str | None,
    ) -> BuildRecord:  # fmt: skip
        """The build's rollout percentage on one channel it is published to (its others stay
        as they are): 404 `channel_not_found` if it is not on that channel."""
        build = await self.reads.get(application.id, build_id)
        await ChannelService(self.db, self.now).set_rollout(
            application.id, build.id, channel, percent, actor_id
        )
        return build

    async def attach_blockmap(
        self, application: ApplicationRecord, build_id: str, source: IO[bytes], size: int
    ) -> BuildRecord:
        """Store `source` (`size` bytes, a file read from its start) as the build's blockmap
        (blockmap.py), replacing any it had; 422 `invalid_blockmap` if it is not one."""
        build = await self.reads.get(application.id, build_id)
        sha256 = await asyncio.to_thread(check_blockmap, source)
        await self.storage.put(blockmap_key(build.storage_key), source, size, BLOCKMAP_TYPE)
        # Deleted meanwhile: nothing to update, and its bytes are the sweeper's (no build owns
        # them), as those of an upload that lands after its build's deletion.
        await self.db.execute(
            update(Build)
            .where(Build.id == build.id)
            .values(blockmap_size=size, blockmap_sha256=sha256)
            .execution_options(synchronize_session=False)
        )
        return await self.reads.get(application.id, build_id)

    async def update(
        self, application: ApplicationRecord, build_id: str, changes: dict[str, Any]
    ) -> BuildRecord:
        """The `mandatory` flag and the `notes` that `changes` has (empty notes: none)."""
        build = await self.reads.get(application.id, build_id)
        columns = {k: v for k, v in changes.items() if k in {"mandatory", "notes"}}
        if "notes" in columns:
            columns["notes"] = columns["notes"] or None
        if columns:
            await self.db.execute(
                update(Build)
                .where(Build.id == build.id)
                .values(**columns)
                .execution_options(synchronize_session=False)
            )
        return await self.reads.get(application.id, build.id)

    # -- downloading -------------------------------------------------------------------------------

    async def download(
        self,
        application: ApplicationRecord,
        build_id: str,
        by: UserRecord,
        user_agent: str | None,
        viewer: Viewer | None = None,
    ) -> str:
        """A short-lived signed address of a ready build's file, for `by` (who sees the build
        only if it was given to them, when `viewer` says so): the API's and the console's
        download."""
        build = await self.reads.get(application.id, build_id, viewer)
        url = await self.reads.ready_file_url(build)
        await self._downloaded(build, user_agent, by.id, None)
        return url

    async def download_through_link(
        self, build: BuildRecord, link: InstallLinkRecord, user_agent: str | None
    ) -> str:
        """A short-lived signed address of the file of an install link's build (its page's
        download, or the asset of its iOS manifest, which the device fetches): the download of
        the link's person for a personal link, of nobody known for a shared one. The link was
        opened (builds/install.py `open`): it is live and its build ready."""
        url = await self.reads.file_url(build)
        await self._downloaded(build, user_agent, link.owner_id, link.id)
        return url

    async def _downloaded(
        self, build: BuildRecord, user_agent: str | None, user_id: str | None, link_id: str | None
    ) -> None:
        """Every download, whichever way it goes: an install event (the build's report and
        download counts) and a `build.downloaded` event, in the request's unit of work."""
        await record_install(self.db, build, InstallEventKind.DOWNLOAD, self.now, user_agent,
                             user_id=user_id, link_id=link_id)  # fmt: skip
        await webhook_events.build_downloaded(
            self.db, build, user_id, link_id, self.public_url, self.now
        )

    # -- deleting ----------------------------------------------------------------------------------

    async def delete(self, application: ApplicationRecord, build_id: str, by: UserRecord) -> None:
        """The build, by `by`: told of (`build.deleted`) and, if it was ready, remembered
        (removed.py)."""
        build = await self.reads.get(application.id, build_id)
        # Locked first: no feedback can be added to it (feedback/service.py) once its
        # screenshots are listed.
        await lock_row(self.db, Build.id, build.id)
        await record_removals(
            self.db, [build], RemovalReason.MEMBER, by.id, self.now, self.public_url
        )
        record_build(self.db, self.now, Actor.of(by), AuditAction.BUILD_DELETED, build)
        screenshots = await screenshots_of_builds(self.db, [build.id])
        # Its icon, install links and feedback go with it (ON DELETE CASCADE).
        await self.db.execute(delete(Build).where(Build.id == build.id))
        # The row first: a crash can leave orphan bytes (the sweeper's), never a broken build.
        after_commit(self.db, self._bytes_remover(build))
        if screenshots:
            storage = self.storage
            after_commit(self.db, lambda: remove_screenshots(storage, screenshots))

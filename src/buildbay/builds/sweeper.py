"""Removes pending builds whose upload link expired without a verify, and ready builds beyond
their application's retention rule (told of and remembered: removed.py), each with its bytes;
the partial files of uploads that a crash cut off; and stored objects that no build owns.

Safe to run in several processes at once: each candidate row is claimed by a conditional delete
(and, on PostgreSQL, locked with SKIP LOCKED so two sweepers never wait on each other), and only
the process whose delete returned a row deletes its bytes. Rows go first, committed: a crash can
leave orphan bytes, never a ready build without them.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from sqlalchemy import delete, or_, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from buildbay.applications.models import Application
from buildbay.applications.reads import APPLICATION
from buildbay.applications.records import ApplicationRecord
from buildbay.audit.record import SYSTEM, AuditAction
from buildbay.audit.retention import sweep_audit_entries
from buildbay.auth.cli_sign_in import sweep_cli_sign_ins
from buildbay.builds.audited import record_build
from buildbay.builds.blockmap import blockmap_key, owner_key
from buildbay.builds.enums import BuildStatus, RemovalReason
from buildbay.builds.models import Build
from buildbay.builds.reads import BUILD
from buildbay.builds.removed import forget_old_removals, record_removals
from buildbay.builds.retention import doomed, ready_builds, rule_of
from buildbay.db.reads import Reads
from buildbay.distribution.join_links import sweep_join_requests
from buildbay.feedback.images import SCREENSHOT_PREFIX
from buildbay.feedback.models import FeedbackScreenshot
from buildbay.feedback.removal import FEEDBACK_PREFIX, remove_screenshots, screenshots_of_builds
from buildbay.invitations.caps import sweep_invitation_counts
from buildbay.publishers.service import sweep_used_id_tokens
from buildbay.storage.base import Storage
from buildbay.storage.disk import remove_unlocked_files

log = logging.getLogger("buildbay.sweeper")

# An upload that started just before its link expired may still be streaming: give it time.
GRACE = timedelta(hours=1)
BATCH = 100
# Builds that never became ready: swept once their upload link has expired. A `failed` one
# too, and a `processing` one whose job never finished (it ran out of attempts): checking
# takes minutes, the link lives a day.
_UNFINISHED = (BuildStatus.PENDING, BuildStatus.FAILED, BuildStatus.PROCESSING)


async def sweep_expired_uploads(
    sessions: async_sessionmaker[AsyncSession], storage: Storage, now: datetime
) -> int:
    swept = 0
    while True:
        async with sessions() as db, db.begin():
            rows = (
                await db.execute(
                    select(Build.id, Build.storage_key)
                    .where(Build.status.in_(_UNFINISHED), Build.expires_at < now - GRACE)
                    .order_by(Build.expires_at)
                    .limit(BATCH)
                    .with_for_update(skip_locked=True)
                )
            ).all()
            if not rows:
                return swept
            claimed = (
                await db.execute(
                    delete(Build)
                    .where(Build.id.in_([r.id for r in rows]), Build.status.in_(_UNFINISHED))
                    .returning(Build.storage_key, Build.upload_id)
                )
            ).all()
        for key, upload_id in claimed:  # after the commit: a crash here leaves only orphan bytes
            if upload_id is not None:
                await storage.abort_multipart(key, upload_id)
            await storage.delete(key)
            await storage.delete(blockmap_key(key))
        swept += len(claimed)
        log.info("swept %d expired pending builds", len(claimed))
        if len(rows) < BATCH:
            return swept


@dataclass(frozen=True)
class Swept:
    expired_uploads: int
    retention: int
    abandoned_uploads: int
    orphan_objects: int
    orphan_uploads: int = 0
    audit_entries: int = 0
    abandoned_screenshots: int = 0


async def sweep(
    sessions: async_sessionmaker[AsyncSession],
    storage: Storage,
    now: datetime,
    public_url: str,
    *,
    audit_retention_days: int | None = None,
    feedback_spool: Path | None = None,
) -> Swept:
    """One round of every sweep (`buildbay sweep`, and `serve` every sweep interval);
    `public_url` is the server's, for the events of what retention deletes;
    `audit_retention_days` (Settings.audit_retention_days) how long audit entries are kept
    (None: this round leaves them); `feedback_spool` where screenshots wait while a feedback is
    re-encoded (feedback/dependencies.py `spool_dir`), whose files a crash may leave."""
    expired = await sweep_expired_uploads(sessions, storage, now)
    retention = await sweep_retention(sessions, storage, now, public_url)
    # An upload still streaming keeps its file locked and fresh; GRACE is only a margin.
    abandoned = await storage.remove_abandoned_uploads(now - GRACE)
    if abandoned:
        log.info("removed %d partial files of uploads cut off by a crash", abandoned)
    screenshots = 0
    if feedback_spool is not None:
        screenshots = await asyncio.to_thread(
            remove_unlocked_files, feedback_spool, (now - GRACE).timestamp(), SCREENSHOT_PREFIX
        )
        if screenshots:
            log.info("removed %d screenshots' files left by a crash", screenshots)
    orphans = await sweep_orphan_objects(sessions, storage, now)
    orphan_uploads = await sweep_orphan_multipart_uploads(sessions, storage, now)
    async with sessions() as db, db.begin():  # the invitation caps' counters of past days
        await sweep_invitation_counts(db, now)
    async with sessions() as db, db.begin():  # removed builds no page or link asks for now
        await forget_old_removals(db, now)
    async with sessions() as db, db.begin():  # join links' confirmations no mail can use now
        await sweep_join_requests(db, now)
    async with sessions() as db, db.begin():  # the command line's sign-ins, expired
        await sweep_cli_sign_ins(db, now)
    async with sessions() as db, db.begin():  # exchanged ID tokens that can no longer pass
        await sweep_used_id_tokens(db, now)
    audit_entries = 0
    if audit_retention_days is not None:
        audit_entries = await sweep_audit_entries(sessions, now, audit_retention_days)
    return Swept(expired, retention, abandoned, orphans, orphan_uploads, audit_entries, screenshots)


async def sweep_orphan_multipart_uploads(
    sessions: async_sessionmaker[AsyncSession], storage: Storage, now: datetime
) -> int:
    """Aborts the multipart uploads (and their parts) that no pending build owns, once they
    are GRACE old: an upload link rolled back after the upload began, a build row deleted by
    a sweep or a delete whose abort a crash cut off, or a bucket's upload begun elsewhere
    under our prefix."""
    aborted = 0
    async for uploads in storage.multipart_uploads(started_before=now - GRACE):
        async with sessions() as db:
            rows = await db.execute(
                select(Build.storage_key, Build.upload_id).where(
                    Build.storage_key.in_([u.key for u in uploads]),
                    Build.status == BuildStatus.PENDING,
                )
            )
            owned = {(key, upload_id) for key, upload_id in rows}
        for upload in uploads:
            if (upload.key, upload.upload_id) not in owned:
                await storage.abort_multipart(upload.key, upload.upload_id)
                aborted += 1
    if aborted:
        log.info("aborted %d multipart uploads that no pending build owns", aborted)
    return aborted


async def sweep_orphan_objects(
    sessions: async_sessionmaker[AsyncSession], storage: Storage, now: datetime
) -> int:
    """Removes stored objects that no build row owns, nor a feedback's screenshot (under
    `feedback/`), once they are GRACE old.

    Deletes remove a build's row first and its bytes after the commit, so a crash between the
    two leaves bytes no row owns; and a presigned S3 PUT can still land after its build was
    deleted (the bucket does not ask us). A build's row exists before its upload URL does, so
    an object without a row is never one that a build will still claim; the grace period only
    keeps the sweeper away from bytes that are being written (an upload's own object is never
    swept: its build owns it, as it owns its blockmap, builds/blockmap.py). A screenshot's
    object is written just before its feedback's row commits (feedback/service.py): one without
    a row after GRACE was left by a crash, or by a feedback sent while its application or
    project was being deleted.
    """
    removed = 0
    async for keys in storage.stored_keys(modified_before=now - GRACE):
        # A blockmap is its build's while the build exists (blockmap.py).
        owners = {key: owner_key(key) or key for key in keys}
        async with sessions() as db:
            builds = set(
                await db.scalars(
                    select(Build.storage_key).where(Build.storage_key.in_(set(owners.values())))
                )
            )
            owned = {key for key, owner in owners.items() if owner in builds}
            screenshots = [key for key in keys if key.startswith(f"{FEEDBACK_PREFIX}/")]
            if screenshots:
                owned.update(
                    await db.scalars(
                        select(FeedbackScreenshot.storage_key).where(
                            FeedbackScreenshot.storage_key.in_(screenshots)
                        )
                    )
                )
        for key in keys:
            if key not in owned:
                await storage.delete(key)
                removed += 1
    if removed:
        log.info("removed %d stored objects that no build owns", removed)
    return removed


async def sweep_retention(
    sessions: async_sessionmaker[AsyncSession], storage: Storage, now: datetime, public_url: str
) -> int:
    """Deletes the ready builds each application's retention rule no longer keeps (retention.py
    reckons which, as its preview does); each is told of (`build.deleted`, `reason:
    "retention"`) and remembered (removed.py) in the transaction that deletes its row."""
    async with sessions() as db:
        applications = (
            await db.execute(
                select(*APPLICATION.columns).where(
                    or_(
                        Application.retention_keep_last.is_not(None),
                        Application.retention_keep_days.is_not(None),
                    )
                )
            )
        ).mappings()
        rules = [APPLICATION.of(row) for row in applications]
    swept = 0
    for application in rules:
        swept += await _apply_rule(sessions, storage, now, application, public_url)
    return swept


async def _apply_rule(
    sessions: async_sessionmaker[AsyncSession],
    storage: Storage,
    now: datetime,
    application: ApplicationRecord,
    public_url: str,
) -> int:
    async with sessions() as db:
        builds = await ready_builds(Reads.within(db), application.id)
    doomed_ids = [build.id for build in doomed(builds, rule_of(application), now)]
    swept = 0
    for start in range(0, len(doomed_ids), BATCH):
        async with sessions() as db, db.begin():
            # Claimed: locked on PostgreSQL (another sweeper skips them), and still ready.
            rows = (
                await db.execute(
                    select(*BUILD.columns)
                    .where(
                        Build.id.in_(doomed_ids[start : start + BATCH]),
                        Build.status == BuildStatus.READY,
                    )
                    .with_for_update(skip_locked=True)
                )
            ).mappings()
            claimed = [BUILD.of(row) for row in rows]
            if not claimed:
                continue
            await record_removals(db, claimed, RemovalReason.RETENTION, None, now, public_url)
            for build in claimed:
                record_build(db, now, SYSTEM, AuditAction.BUILD_DELETED, build, reason="retention")
            screenshots = await screenshots_of_builds(db, [b.id for b in claimed])
            # Their feedback goes with them (ON DELETE CASCADE).
            await db.execute(delete(Build).where(Build.id.in_([b.id for b in claimed])))
        for build in claimed:  # after the commit: a crash here leaves only orphan bytes
            await storage.delete(build.storage_key)
            if build.blockmap_size is not None:
                await storage.delete(blockmap_key(build.storage_key))
        await remove_screenshots(storage, screenshots)
        swept += len(claimed)
    if swept:
        log.info("retention: deleted %d builds of %s", swept, application.id)
    return swept

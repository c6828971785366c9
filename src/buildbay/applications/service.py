"""Applications inside a project: what changes them, in a unit of work (reading is
applications/reads.py's)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any

from sqlalchemy import delete, update
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.applications.models import Application
from buildbay.applications.reads import APPLICATION, application_named, application_view
from buildbay.applications.records import ApplicationRecord, ApplicationView
from buildbay.applications.update_keys import add_update_key, new_update_key, rotate_update_key
from buildbay.audit.record import Actor, AuditAction, Target, record
from buildbay.builds.models import Build
from buildbay.builds.removal import keys_of_builds_under, remove_stored_files
from buildbay.channels.service import ChannelService
from buildbay.db.concurrency import lock_row
from buildbay.db.engine import after_commit
from buildbay.db.reads import Reads
from buildbay.distribution.groups import check_group_ids
from buildbay.distribution.models import EVERYONE
from buildbay.errors import Conflict
from buildbay.feedback.removal import remove_screenshots, screenshots_of_application
from buildbay.ids import new_id
from buildbay.projects.models import Project
from buildbay.projects.records import ProjectRecord
from buildbay.storage.base import Storage
from buildbay.webhooks import events as webhook_events


def _columns(fields: dict[str, Any]) -> dict[str, Any]:
    """A request's fields as the model's columns (`retention` is four of them)."""
    columns = dict(fields)
    if "retention" in columns:
        rule = columns.pop("retention") or {}
        protect = rule.get("protect") or {}
        columns["retention_keep_last"] = rule.get("keep_last")
        columns["retention_keep_days"] = rule.get("keep_days")
        columns["retention_protect_groups"] = protect.get("groups", True)
        columns["retention_protect_channels"] = protect.get("channels", True)
    return columns


RENAMED = "renamed"  # the code of rename_warning's warning (a warning's, not a problem's)


def rename_warning(before: ApplicationRecord, after: ApplicationRecord) -> str | None:
    """What a rename breaks, said to whoever renames (the API's answer, the console's notice):
    CI jobs that name the application by its old name. A change of case breaks nothing: the
    CLI finds a name in any case."""
    if after.name.casefold() == before.name.casefold():
        return None
    return (
        f"Renamed from {before.name} to {after.name}: CI jobs that name the application by "
        f'name (buildbay upload --app "{before.name}") must change. Its id never changes: '
        f"name it by --app-id {before.id} instead."
    )


class ApplicationService:
    def __init__(self, db: AsyncSession, now: datetime) -> None:
        self.db = db
        self.now = now
        self.reads = Reads.within(db)

    async def _check_name(self, project_id: str, name: str, other_than: str | None = None) -> None:
        # The project's row lock makes two creations (or renames) of one name take turns.
        await lock_row(self.db, Project.id, project_id)
        if await application_named(self.reads, project_id, name, other_than) is not None:
            raise Conflict(
                f"The project already has an application named {name}", code="name_taken"
            )

    async def create(
        self, project: ProjectRecord, fields: dict[str, Any], *, by: Actor
    ) -> ApplicationView:
        await self._check_name(project.id, fields["name"])
        fields = {"auto_distribute_groups": [EVERYONE], "install_link_days": 14, **fields}
        await check_group_ids(self.reads, project.id, fields["auto_distribute_groups"])
        application_id, key = new_id("app"), new_update_key()
        application = Application(
            id=application_id,
            project_id=project.id,
            update_key=key,
            created_at=self.now,
            updated_at=self.now,
            **_columns(fields),
        )
        self.db.add(application)
        await self.db.flush()
        add_update_key(self.db, application_id, self.now, key)
        # Every application has a `default` channel: verify publishes to it unless told not to.
        await ChannelService(self.db, self.now).create_default(application_id)
        view = ApplicationView(APPLICATION.of_entity(application), 0)
        await webhook_events.application_created(self.db, view, self.now)
        self._record(by, AuditAction.APPLICATION_CREATED, view.application)
        return view

    async def update(
        self, application: ApplicationRecord, changes: dict[str, Any], *, by: Actor
    ) -> ApplicationView:
        if "name" in changes:
            await self._check_name(application.project_id, changes["name"], application.id)
        if "auto_distribute_groups" in changes:
            await check_group_ids(
                self.reads, application.project_id, changes["auto_distribute_groups"]
            )
        columns = {**_columns(changes), "updated_at": self.now}
        await self.db.execute(
            update(Application).where(Application.id == application.id).values(**columns)
        )
        after = replace(application, **columns)
        if after.name != application.name:
            details = {"from": application.name}
            self._record(by, AuditAction.APPLICATION_RENAMED, after, details)
        return await application_view(self.reads, after)

    async def rotate_update_key(self, application: ApplicationRecord) -> ApplicationView:
        """A new update key; the one before answers for 7 more days (update_keys.py)."""
        key = await rotate_update_key(self.db, application.id, self.now)
        return await application_view(self.reads, replace(application, update_key=key))

    async def delete(self, application: ApplicationRecord, storage: Storage, *, by: Actor) -> None:
        """Rows first (builds cascade), the stored files once committed (see builds.removal)."""
        await webhook_events.application_deleted(self.db, application, self.now)
        keys = await keys_of_builds_under(
            self.db, Application.id, Build.application_id, application.id
        )
        screenshots = await screenshots_of_application(self.db, application.id)
        await self.db.execute(delete(Application).where(Application.id == application.id))
        self._record(by, AuditAction.APPLICATION_DELETED, application)
        prefix = f"{application.project_id}/{application.id}/"
        after_commit(self.db, lambda: remove_stored_files(storage, keys, prefix))
        if screenshots:  # its builds' feedback went with them
            after_commit(self.db, lambda: remove_screenshots(storage, screenshots))

    def _record(
        self,
        by: Actor,
        action: AuditAction,
        application: ApplicationRecord,
        details: dict[str, str] | None = None,
    ) -> None:
        target = Target("application", application.id, application.name)
        record(self.db, at=self.now, actor=by, action=action, target=target,
               project_id=application.project_id, details=details)  # fmt: skip

"""Applications inside a project."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.applications.models import Application
from buildbay.builds.models import Build, BuildStatus
from buildbay.db.engine import EntityColumns, pages, read_rows
from buildbay.ids import new_id, split_page
from buildbay.projects.models import Project
from buildbay.storage.base import Storage


@dataclass(frozen=True, slots=True)
class ApplicationView:
    application: Application
    builds_count: int


_applications, _builds = Application.__table__, Build.__table__


def _ready_builds_of(application_id: Any) -> Any:
    """How many ready builds an application has (`application_id`: a value or a column)."""
    return select(func.count(_builds.c.id)).where(
        _builds.c.application_id == application_id, _builds.c.status == BuildStatus.READY
    )


# The list, built once and read without the ORM (see FastSelect): it is what clients poll.
_APPLICATION = EntityColumns(Application, "")
_applications_of_project = (
    select(
        *_APPLICATION.columns,
        _ready_builds_of(_applications.c.id).scalar_subquery().label("builds_count"),
    )
    .where(_applications.c.project_id == bindparam("project_id"))
    .order_by(_applications.c.id.desc())
    .limit(bindparam("limit"))
)
_APPLICATIONS_OF_PROJECT, _APPLICATIONS_OF_PROJECT_AFTER = pages(
    _applications_of_project, _applications.c.id
)


def _columns(fields: dict[str, Any]) -> dict[str, Any]:
    """A request's fields as the model's columns (`retention` is two of them)."""
    columns = dict(fields)
    if "retention" in columns:
        rule = columns.pop("retention") or {}
        columns["retention_keep_last"] = rule.get("keep_last")
        columns["retention_keep_days"] = rule.get("keep_days")
    return columns


class ApplicationService:
    def __init__(self, db: AsyncSession, now: datetime) -> None:
        self.db = db
        self.now = now

    async def list(
        self, project: Project, limit: int, after_id: str | None
    ) -> tuple[list[ApplicationView], str | None]:
        """A page of the project's applications: transient copies, for showing."""
        query = _APPLICATIONS_OF_PROJECT_AFTER if after_id else _APPLICATIONS_OF_PROJECT
        params = {"project_id": project.id, "after_id": after_id, "limit": limit + 1}
        rows = await read_rows(self.db, query, params)
        views = [ApplicationView(_APPLICATION.of(row), row["builds_count"]) for row in rows]
        return split_page(views, limit, lambda v: v.application.id)

    async def create(self, project: Project, fields: dict[str, Any]) -> ApplicationView:
        application = Application(
            id=new_id("app"),
            project_id=project.id,
            created_at=self.now,
            updated_at=self.now,
            **_columns(fields),
        )
        self.db.add(application)
        await self.db.flush()
        return ApplicationView(application, 0)

    async def view(self, application: Application) -> ApplicationView:
        count = await self.db.scalar(_ready_builds_of(application.id))
        return ApplicationView(application, count or 0)

    async def update(self, application: Application, changes: dict[str, Any]) -> ApplicationView:
        for name, value in _columns(changes).items():
            setattr(application, name, value)
        application.updated_at = self.now
        await self.db.flush()
        return await self.view(application)

    async def delete(self, application: Application, storage: Storage) -> None:
        """Rows first (builds cascade), committed, then the stored files (see ProjectService)."""
        await self.db.delete(application)
        await self.db.commit()
        await storage.delete_prefix(f"{application.project_id}/{application.id}/")

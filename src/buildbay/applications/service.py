"""Applications inside a project."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.applications.models import Application
from buildbay.builds.models import Build, BuildStatus
from buildbay.ids import new_id, split_page
from buildbay.projects.models import Project
from buildbay.storage.base import Storage


@dataclass(frozen=True, slots=True)
class ApplicationView:
    application: Application
    builds_count: int


def _ready_builds_of(application_id: Any) -> Any:
    return select(func.count(Build.id)).where(
        Build.application_id == application_id, Build.status == BuildStatus.READY
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
        stmt = (
            select(Application, _ready_builds_of(Application.id).scalar_subquery())
            .where(Application.project_id == project.id)
            .order_by(Application.id.desc())
            .limit(limit + 1)
        )
        if after_id is not None:
            stmt = stmt.where(Application.id < after_id)
        rows = (await self.db.execute(stmt)).all()
        views = [ApplicationView(app, count) for app, count in rows]
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

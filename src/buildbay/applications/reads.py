"""Applications as read (db/reads.py): records and the queries that give them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, func, select

from buildbay.applications.enums import Platform
from buildbay.applications.models import Application
from buildbay.builds.enums import BuildStatus
from buildbay.builds.models import Build
from buildbay.db.reads import Reads, RecordOf
from buildbay.ids import split_page


@dataclass(frozen=True, slots=True)
class ApplicationRecord:
    id: str
    project_id: str
    name: str
    platform: Platform
    bundle_id: str | None
    retention_keep_last: int | None
    retention_keep_days: int | None
    update_key: str | None
    auto_distribute_groups: list[str]
    install_link_days: int
    created_at: datetime
    updated_at: datetime


APPLICATION = RecordOf(ApplicationRecord, Application)


@dataclass(frozen=True, slots=True)
class ApplicationView:
    application: ApplicationRecord
    builds_count: int


def _ready_builds_of(application_id: Any) -> Any:
    """How many ready builds an application has (`application_id`: a value or a column)."""
    return select(func.count(Build.id)).where(
        Build.application_id == application_id, Build.status == BuildStatus.READY
    )


# Built once: composing a statement per request costs more than the database takes to run it.
_READY_BUILDS = _ready_builds_of(bindparam("application_id"))
_APPLICATIONS_OF_PROJECT = (
    select(
        *APPLICATION.columns,
        _ready_builds_of(Application.id).scalar_subquery().label("builds_count"),
    )
    .where(Application.project_id == bindparam("project_id"))
    .order_by(Application.id.desc())
    .limit(bindparam("limit"))
)


async def applications_page(
    reads: Reads, project_id: str, limit: int, after_id: str | None
) -> tuple[list[ApplicationView], str | None]:
    """A page of the project's applications, newest first."""
    query = _APPLICATIONS_OF_PROJECT
    if after_id is not None:
        query = query.where(Application.id < after_id)
    rows = await reads.all(query, {"project_id": project_id, "limit": limit + 1})
    views = [ApplicationView(APPLICATION.of(row), row["builds_count"]) for row in rows]
    return split_page(views, limit, lambda view: view.application.id)


async def application_view(reads: Reads, application: ApplicationRecord) -> ApplicationView:
    count = await reads.scalar(_READY_BUILDS, {"application_id": application.id})
    return ApplicationView(application, count or 0)


async def application_named(
    reads: Reads, project_id: str, name: str, other_than: str | None = None
) -> ApplicationRecord | None:
    """The project's application named `name` in any case (besides `other_than`)."""
    query = (
        select(*APPLICATION.columns)
        .where(
            Application.project_id == project_id,
            func.lower(Application.name) == func.lower(name),
        )
        .limit(1)
    )
    if other_than is not None:
        query = query.where(Application.id != other_than)
    row = await reads.first(query)
    return None if row is None else APPLICATION.of(row)

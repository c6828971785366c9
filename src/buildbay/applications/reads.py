"""Applications as read (db/reads.py): records and the queries that give them."""

from __future__ import annotations

from typing import Any

from sqlalchemy import bindparam, func, select

from buildbay.applications.models import Application
from buildbay.applications.records import ApplicationRecord, ApplicationView
from buildbay.builds.enums import BuildStatus
from buildbay.builds.models import Build
from buildbay.db.reads import Reads, RecordOf
from buildbay.distribution.visibility import DISTRIBUTED_TO_VIEWER, Viewer, viewer_params
from buildbay.ids import split_page

APPLICATION = RecordOf(ApplicationRecord, Application)


def _ready_builds_of(application_id: Any, *seen: Any) -> Any:
    """How many ready builds an application has (`application_id`: a value or a column), of
    those `seen` (conditions on the build) lets through."""
    return select(func.count(Build.id)).where(
        Build.application_id == application_id, Build.status == BuildStatus.READY, *seen
    )


def _applications_of_project(*seen: Any) -> Any:
    return (
        select(
            *APPLICATION.columns,
            _ready_builds_of(Application.id, *seen).scalar_subquery().label("builds_count"),
        )
        .where(Application.project_id == bindparam("project_id"))
        .order_by(Application.id.desc())
        .limit(bindparam("limit"))
    )


# Built once: composing a statement per request costs more than the database takes to run it.
# A tester counts only the builds distributed to them (distribution/visibility.py), in the same
# one statement per page.
_READY_BUILDS = _ready_builds_of(bindparam("application_id"))
_READY_BUILDS_SEEN = _ready_builds_of(bindparam("application_id"), DISTRIBUTED_TO_VIEWER)
_APPLICATIONS_OF_PROJECT = _applications_of_project()
_APPLICATIONS_OF_PROJECT_SEEN = _applications_of_project(DISTRIBUTED_TO_VIEWER)


async def applications_page(
    reads: Reads, project_id: str, limit: int, after_id: str | None, viewer: Viewer | None = None
) -> tuple[list[ApplicationView], str | None]:
    """A page of the project's applications, newest first; `buildsCount` counts what `viewer`
    (a tester) was given, or every ready build (None: a developer or above)."""
    query = _APPLICATIONS_OF_PROJECT if viewer is None else _APPLICATIONS_OF_PROJECT_SEEN
    if after_id is not None:
        query = query.where(Application.id < after_id)
    params: dict[str, Any] = {"project_id": project_id, "limit": limit + 1}
    if viewer is not None:
        params.update(viewer_params(viewer))
    rows = await reads.all(query, params)
    views = [ApplicationView(APPLICATION.of(row), row["builds_count"]) for row in rows]
    return split_page(views, limit, lambda view: view.application.id)


async def application_view(
    reads: Reads, application: ApplicationRecord, viewer: Viewer | None = None
) -> ApplicationView:
    """The application with the count of its ready builds (those given to `viewer`, if a
    tester)."""
    params: dict[str, Any] = {"application_id": application.id}
    if viewer is None:
        count = await reads.scalar(_READY_BUILDS, params)
    else:
        count = await reads.scalar(_READY_BUILDS_SEEN, {**params, **viewer_params(viewer)})
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

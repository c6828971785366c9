"""The console: an application's page, its builds and their install links (the browser upload
is uploads.py)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC
from urllib.parse import urlencode

from fastapi import APIRouter, Request, Response
from fastapi.responses import RedirectResponse
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.applications.enums import FILE_TYPES
from buildbay.builds.dependencies import (
    build_reads,
    build_service,
    install_link_reads,
    install_links,
)
from buildbay.builds.devices import apple_model_of
from buildbay.builds.install import InstallLinks
from buildbay.builds.metadata import DESKTOP_FILES
from buildbay.builds.reads import BuildOrder, BuildQuery, BuildReads
from buildbay.builds.removed import RECENT_DAYS, RemovedBuildRecord, recent_removals
from buildbay.builds.schemas import (
    DEFAULT_HOURS,
    MAX_NOTES_LENGTH,
    version_label,
)
from buildbay.builds.service import human_size
from buildbay.channels.reads import channels_of
from buildbay.console.charts import downloads_chart
from buildbay.console.pages import (
    ConsoleRoute,
    can,
    page,
    see_other,
    visit,
    visit_application,
)
from buildbay.console.session import Visitor
from buildbay.db.reads import Reads
from buildbay.deps import get_context
from buildbay.devices.reach import profile_scope
from buildbay.devices.records import ProfileScope
from buildbay.devices.viewer import missed_on_page
from buildbay.distribution.installs import downloads_by_day
from buildbay.errors import ValidationFailed
from buildbay.feeds.urls import feed_addresses
from buildbay.projects.authorization import application_of, tester_of
from buildbay.projects.enums import ProjectRole
from buildbay.projects.reads import members
from buildbay.schemas import page_of

CHART_DAYS = 30
router = APIRouter(route_class=ConsoleRoute, include_in_schema=False)


def _links(request: Request, db: AsyncSession) -> InstallLinks:
    return install_links(get_context(request), db)


def _build_reads(request: Request, db: AsyncSession) -> BuildReads:
    return build_reads(get_context(request), Reads.within(db))


@router.get("/projects/{project_id}/apps/{app_id}")
async def application_page(request: Request, project_id: str, app_id: str) -> Response:
    visitor, db = await visit(request)
    return await render_application(request, visitor, db, project_id, app_id)


async def render_application(
    request: Request, visitor: Visitor, db: AsyncSession, project_id: str, app_id: str,
    failed: str | None = None, values: dict[str, str] | None = None,
    errors: dict[str, str] | None = None, status_code: int = 200,
) -> Response:  # fmt: skip
    """The application page; after a refused form, `failed` names it ("channel") and its fields
    show `values` and `errors`."""
    reads = Reads.within(db)
    access = await application_of(reads, visitor.principal, project_id, app_id, ProjectRole.TESTER)
    shown = _shown(request)
    query = BuildQuery(
        access.application.id,
        BUILDS_PER_PAGE,
        after_id=shown.after_id,
        sort=shown.sort,
        viewer=tester_of(access),
        search=shown.search,
    )
    found, next_cursor = await build_reads(get_context(request), reads).shown_page(query)
    builds = [b.build for b in found]
    extras = {b.build.id: b.extras for b in found}
    links = install_link_reads(get_context(request), reads)
    # Sharing is a developer's: a tester is offered neither the shared link nor a new one.
    sharing = access.role.includes(ProjectRole.DEVELOPER)
    current = {k: e.link for k, e in extras.items() if e.link is not None and sharing}
    uploaders = {m.user_id: m for m in await members(reads, access.project.id)}
    channels = await channels_of(reads, access.application.id, tester_of(access))
    versions = {b.id: version_label(b.metadata_) for b in builds}
    # Beside an ad-hoc or development build: "Not made for your iPhone", when it lists none
    # of the visitor's.
    listed = [b.id for b in builds
              if profile_scope(b.file_name, b.metadata_) is ProfileScope.LISTED]  # fmt: skip
    agent = apple_model_of(request.headers.get("user-agent"))
    not_for_you = await missed_on_page(reads, visitor.principal.user.id, listed, agent)
    chart = None
    removals: list[RemovedBuildRecord] = []
    if access.role.includes(ProjectRole.DEVELOPER):
        now = get_context(request).clock.now()
        days = await downloads_by_day(reads, access.application.id, now.astimezone(UTC).date(),
                                      CHART_DAYS)  # fmt: skip
        # No bars to draw: the page says so in words instead of an empty axis.
        chart = downloads_chart(days) if any(count for _, count in days) else None
        # What went, and why (a tester sees only what was given to them: not these).
        removals = await recent_removals(reads, access.application.id, now)
    feeds: dict[str, dict[str, str]] = {}
    application = access.application
    if (
        access.role.includes(ProjectRole.DEVELOPER)
        and application.update_key
        and (application.platform in DESKTOP_FILES)
    ):
        public_url = get_context(request).settings.resolved_public_url
        feeds = {
            c.channel.name: feed_addresses(
                public_url, application.update_key, application.platform, c.channel.name
            )
            for c in channels
        }
    return page(
        "console/application.html", visitor, status_code, project=access.project, feeds=feeds,
        application=access.application, role=access.role, can=can(access.role),
        builds=builds, install_urls={k: links.url(v) for k, v in current.items()},
        install_expiry={k: v.expires_at for k, v in current.items()},
        uploaders=uploaders, human_size=human_size, versions=versions,
        fresh_link=request.query_params.get("link"),
        max_notes=MAX_NOTES_LENGTH, downloads=chart, downloads_days=CHART_DAYS,
        file_types=FILE_TYPES.get(access.application.platform, ()),
        channels=channels, build_channels={k: extra.channels for k, extra in extras.items()},
        removals=removals, removals_days=RECENT_DAYS, not_for_you=not_for_you,
        # Each build's feedback still new, for the team (a link to the inbox on that build).
        new_feedback={k: e.new_feedback for k, e in extras.items()} if sharing else {},
        failed=failed, values=values or {}, errors=errors or {}, shown=shown,
        next_page=_page_query(shown, next_cursor) if next_cursor else None,
        first_page=_page_query(shown, None) if shown.after_id else None,
    )  # fmt: skip


BUILDS_PER_PAGE = 25
MAX_SEARCH = 100


@dataclass(frozen=True, slots=True)
class ShownBuilds:
    """Which builds the application page lists: `?q=` (in the file name, notes or version),
    `?sort=newest|version` and `?cursor=` (the next page's, as the API's)."""

    search: str
    sort: BuildOrder
    after_id: str | None


def _shown(request: Request) -> ShownBuilds:
    query = request.query_params
    sort = BuildOrder.VERSION if query.get("sort") == "version" else BuildOrder.NEWEST
    search = query.get("q", "").strip()[:MAX_SEARCH]
    try:
        after_id = page_of(None, query.get("cursor")).after_id
    except ValidationFailed:
        raise ValidationFailed(
            "This address asks for a page of builds that the console did not give out. Start "
            "again from the application's page."
        ) from None
    return ShownBuilds(search, sort, after_id)


def _page_query(shown: ShownBuilds, cursor: str | None) -> str:
    """The query string of a page of the same search and order."""
    wanted = {"q": shown.search, "sort": shown.sort.value, "cursor": cursor or ""}
    return urlencode({k: v for k, v in wanted.items() if v and (k, v) != ("sort", "newest")})


def application_path(project_id: str, app_id: str) -> str:
    return f"/projects/{project_id}/apps/{app_id}"


@router.post("/projects/{project_id}/apps/{app_id}/builds/{build_id}/delete")
async def delete_build(request: Request, project_id: str, app_id: str, build_id: str) -> Response:
    visitor, db, access = await visit_application(
        request, project_id, app_id, ProjectRole.DEVELOPER
    )
    await build_service(get_context(request), db).delete(
        access.application, build_id, visitor.principal.user
    )
    return see_other(application_path(project_id, app_id))


@router.get("/projects/{project_id}/apps/{app_id}/builds/{build_id}/download")
async def download_build(request: Request, project_id: str, app_id: str, build_id: str) -> Response:
    visitor, db, access = await visit_application(request, project_id, app_id, ProjectRole.TESTER)
    url = await build_service(get_context(request), db).download(
        access.application,
        build_id,
        visitor.principal.user,
        request.headers.get("user-agent"),
        tester_of(access),
    )
    return RedirectResponse(url, status_code=302)


@router.post("/projects/{project_id}/apps/{app_id}/builds/{build_id}/install-link")
async def create_install_link(
    request: Request, project_id: str, app_id: str, build_id: str
) -> Response:
    """Share the build (developer+, as the API's): its live shared link, else a new one."""
    visitor, db, access = await visit_application(
        request, project_id, app_id, ProjectRole.DEVELOPER
    )
    build = await _build_reads(request, db).get(access.application.id, build_id)
    await _links(request, db).share(build, visitor.principal.user, DEFAULT_HOURS)
    return see_other(f"{application_path(project_id, app_id)}?link={build.id}#build-{build.id}")

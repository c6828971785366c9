"""The console: a build's page for developers, where it is distributed to groups and e-mails,
and who it reached, who was mailed, opened and downloaded it."""

from __future__ import annotations

from urllib.parse import quote

from fastapi import APIRouter, Request, Response
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.applications.schemas import ApplicationUpdate
from buildbay.applications.service import ApplicationService
from buildbay.builds.reads import BuildReads
from buildbay.builds.schemas import version_label
from buildbay.builds.service import human_size
from buildbay.console.groups import emails_of
from buildbay.console.pages import (
    ConsoleRoute,
    FormError,
    can,
    page,
    parse_form,
    posted_form,
    see_other,
    visit,
)
from buildbay.console.session import Visitor
from buildbay.db.reads import Reads
from buildbay.deps import get_context
from buildbay.distribution.groups import groups_page
from buildbay.distribution.installs import installs_of
from buildbay.distribution.schemas import DistributionRequest
from buildbay.distribution.service import Distributor
from buildbay.errors import BuildbayError
from buildbay.numbers import whole_number
from buildbay.projects.authorization import application_of
from buildbay.projects.models import ProjectRole

router = APIRouter(route_class=ConsoleRoute, include_in_schema=False)


def _build_path(project_id: str, app_id: str, build_id: str) -> str:
    return f"/projects/{project_id}/apps/{app_id}/builds/{build_id}"


@router.get("/projects/{project_id}/apps/{app_id}/builds/{build_id}")
async def build_page(request: Request, project_id: str, app_id: str, build_id: str) -> Response:
    visitor, db = await visit(request)
    return await _render(request, visitor, db, project_id, app_id, build_id)


async def _render(
    request: Request, visitor: Visitor, db: AsyncSession, project_id: str, app_id: str,
    build_id: str, error: str | None = None, values: dict[str, object] | None = None,
    status_code: int = 200,
) -> Response:  # fmt: skip
    reads = Reads.within(db)
    access = await application_of(
        reads, visitor.principal, project_id, app_id, ProjectRole.DEVELOPER
    )
    build = await BuildReads.of(get_context(request), reads).get(access.application.id, build_id)
    groups, _ = await groups_page(reads, access.project, 100, None)
    return page(
        "console/build.html", visitor, status_code, project=access.project,
        application=access.application, build=build, can=can(access.role), groups=groups,
        report=await installs_of(reads, build), version=version_label(build.metadata_),
        size=human_size(build.file_size), error=error, values=values or {},
        notice=request.query_params.get("notice"),
    )  # fmt: skip


@router.post("/projects/{project_id}/apps/{app_id}/builds/{build_id}/distribute")
async def distribute(request: Request, project_id: str, app_id: str, build_id: str) -> Response:
    visitor, db = await visit(request)
    reads = Reads.within(db)
    access = await application_of(
        reads, visitor.principal, project_id, app_id, ProjectRole.DEVELOPER
    )
    form = await posted_form(request)
    values: dict[str, object] = {
        "groups": [str(g) for g in form.getlist("groups")],
        "emails": str(form.get("emails") or ""),
        "notify": form.get("notify") == "on",
    }
    try:
        body = parse_form(
            DistributionRequest,
            {"groups": values["groups"], "emails": emails_of(str(values["emails"])),
             "notify": values["notify"]},
        )  # fmt: skip
        assert isinstance(body, DistributionRequest)
        if not body.groups and not body.emails:
            raise FormError({"groups": "Choose a group or enter an e-mail."})
        build = await BuildReads.of(get_context(request), reads).get(
            access.application.id, build_id
        )
        async with db.begin_nested():
            result = await Distributor.of(get_context(request), db).distribute(
                access, build, body.groups, [str(e) for e in body.emails], body.notify
            )
    except FormError as exc:
        error = exc.by_field.get("groups") or "Enter e-mail addresses separated by commas."
        return await _render(request, visitor, db, project_id, app_id, build_id, error, values,
                             422)  # fmt: skip
    except BuildbayError as exc:
        if exc.status >= 500 or exc.status == 404:
            raise
        return await _render(request, visitor, db, project_id, app_id, build_id, exc.detail,
                             values, exc.status)  # fmt: skip
    notice = (
        f"Distributed: {result.testers_reached} new tester"
        f"{'' if result.testers_reached == 1 else 's'} reached, {result.notified} mailed."
    )
    return see_other(_build_path(project_id, app_id, build_id) + f"?notice={quote(notice)}")


@router.post("/projects/{project_id}/apps/{app_id}/distribution")
async def distribution_settings(request: Request, project_id: str, app_id: str) -> Response:
    """The application's autoDistributeGroups and installLinkDays (admin+, as the API)."""
    visitor, db = await visit(request)
    access = await application_of(
        Reads.within(db), visitor.principal, project_id, app_id, ProjectRole.ADMIN
    )
    form = await posted_form(request)
    app_path = f"/projects/{project_id}/apps/{app_id}/settings"  # the form's page
    try:
        body = parse_form(
            ApplicationUpdate,
            {"autoDistributeGroups": [str(g) for g in form.getlist("groups")],
             "installLinkDays": whole_number(str(form.get("installLinkDays") or ""))},
        )  # fmt: skip
    except FormError:
        error = quote("Enter a number of days from 1 to 90.")
        return see_other(f"{app_path}?settings_error={error}#distribution")
    changes = body.model_dump(exclude_unset=True)
    await ApplicationService(db, get_context(request).clock.now()).update(
        access.application, changes
    )
    return see_other(f"{app_path}#distribution")

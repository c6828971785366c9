"""The console: distributing a build to groups and e-mails (from its page, console/build_page.py),
and the application's distribution settings (from its settings page)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from buildbay.applications.dependencies import application_service
from buildbay.applications.schemas import ApplicationUpdate
from buildbay.audit.record import actor_of
from buildbay.builds.dependencies import build_reads
from buildbay.console.application_settings import render_settings
from buildbay.console.build_page import build_path, render_build
from buildbay.console.groups import emails_of
from buildbay.console.pages import (
    ConsoleRoute,
    FormError,
    parse_form,
    posted_form,
    said,
    see_other,
    visit_application,
)
from buildbay.db.reads import Reads
from buildbay.deps import get_context
from buildbay.distribution.dependencies import distributor
from buildbay.distribution.schemas import DistributionRequest
from buildbay.errors import BuildbayError
from buildbay.invitations.caps import not_invited_sentences
from buildbay.numbers import whole_number
from buildbay.projects.enums import ProjectRole

router = APIRouter(route_class=ConsoleRoute, include_in_schema=False)


@router.post("/projects/{project_id}/apps/{app_id}/builds/{build_id}/distribute")
async def distribute(request: Request, project_id: str, app_id: str, build_id: str) -> Response:
    visitor, db, access = await visit_application(
        request, project_id, app_id, ProjectRole.DEVELOPER
    )
    reads = Reads.within(db)
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
        build = await build_reads(get_context(request), reads).get(access.application.id, build_id)
        async with db.begin_nested():
            result = await distributor(get_context(request), db).distribute(
                access, build, body.groups, [str(e) for e in body.emails], body.notify
            )
    except FormError as exc:
        error = exc.by_field.get("groups") or "Enter e-mail addresses separated by commas."
        return await render_build(request, visitor, db, project_id, app_id, build_id,
                                  "distribute", values, {"form": error}, 422)  # fmt: skip
    except BuildbayError as exc:
        if exc.status >= 500 or exc.status == 404:
            raise
        errors = {"form": said(exc)}
        return await render_build(request, visitor, db, project_id, app_id, build_id,
                                  "distribute", values, errors, exc.status)  # fmt: skip
    notice = f"Distributed: {result.sentence()}; {result.notified} mailed."
    if result.admission.refused:
        notice += " " + not_invited_sentences(result.admission.refused)
    visitor.tell(notice)
    return see_other(build_path(project_id, app_id, build_id))


@router.post("/projects/{project_id}/apps/{app_id}/distribution")
async def distribution_settings(request: Request, project_id: str, app_id: str) -> Response:
    """The application's autoDistributeGroups and installLinkDays (admin+, as the API)."""
    visitor, db, access = await visit_application(request, project_id, app_id, ProjectRole.ADMIN)
    form = await posted_form(request)
    app_path = f"/projects/{project_id}/apps/{app_id}/settings"  # the form's page
    try:
        body = parse_form(
            ApplicationUpdate,
            {"autoDistributeGroups": [str(g) for g in form.getlist("groups")],
             "installLinkDays": whole_number(str(form.get("installLinkDays") or ""))},
        )  # fmt: skip
    except FormError:
        return await render_settings(
            request, visitor, db, project_id, app_id, status_code=422,
            settings_error="Enter a number of days from 1 to 90.",
        )  # fmt: skip
    changes = body.model_dump(exclude_unset=True)
    await application_service(get_context(request), db).update(
        access.application, changes, by=actor_of(access)
    )
    return see_other(f"{app_path}#distribution")

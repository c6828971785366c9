"""The console: an application's settings page (admin+, as the API's PUT and DELETE of an
application): its name, platform, bundle id, retention, distribution, and deleting it."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.applications.dependencies import application_service
from buildbay.applications.enums import Platform
from buildbay.applications.schemas import ApplicationUpdate, RetentionRule
from buildbay.applications.service import rename_warning
from buildbay.console.pages import (
    ConsoleRoute,
    FormError,
    can,
    form_fields,
    page,
    parse_form,
    see_other,
    visit,
    visit_application,
)
from buildbay.console.session import Visitor
from buildbay.db.reads import Reads
from buildbay.deps import get_context
from buildbay.distribution.groups import groups_page
from buildbay.errors import Conflict
from buildbay.numbers import whole_number
from buildbay.projects.authorization import application_of
from buildbay.projects.enums import ProjectRole

router = APIRouter(route_class=ConsoleRoute, include_in_schema=False)

PLATFORMS = [platform.value for platform in Platform]
# What each field of the form needs, as a person reads it beside the field (pydantic's own
# messages quote patterns and types).
SENTENCES = {
    "platform": "Choose one of the platforms listed.",
    "bundleId": "Enter a bundle id such as com.acme.app: letters, digits, dots, dashes and "
    "underscores, starting with a letter or digit, or leave it empty.",
    "keepLast": "Enter a number of builds from 1 to 100,000, or leave it empty.",
    "keepDays": "Enter a number of days from 1 to 36,500, or leave it empty.",
}


def settings_path(project_id: str, app_id: str) -> str:
    return f"/projects/{project_id}/apps/{app_id}/settings"


@router.get("/projects/{project_id}/apps/{app_id}/settings")
async def settings_page(request: Request, project_id: str, app_id: str) -> Response:
    visitor, db = await visit(request)
    return await render_settings(request, visitor, db, project_id, app_id)


async def render_settings(
    request: Request, visitor: Visitor, db: AsyncSession, project_id: str, app_id: str,
    failed: str | None = None, values: dict[str, str] | None = None,
    errors: dict[str, str] | None = None, status_code: int = 200,
    settings_error: str | None = None,
) -> Response:  # fmt: skip
    """The page; after a refused form, `failed` names it ("settings", "delete") and its fields
    show `values` and `errors` (the distribution form's, console/distribution.py: its one
    field's `settings_error`)."""
    reads = Reads.within(db)
    access = await application_of(reads, visitor.principal, project_id, app_id, ProjectRole.ADMIN)
    groups = (await groups_page(reads, access.project, 100, None))[0]
    return page(
        "console/application_settings.html", visitor, status_code, project=access.project,
        application=access.application, can=can(access.role), platforms=PLATFORMS,
        groups=groups, settings_error=settings_error,
        failed=failed, values=values or {}, errors=errors or {},
    )  # fmt: skip


def _number(text: str) -> int | str | None:
    """A form's number field: empty is None, digits a number, anything else stays text (the
    schema then refuses it)."""
    text = text.strip()
    if not text:
        return None
    found = whole_number(text)
    return text if found is None else found


def _changes(fields: dict[str, str]) -> dict[str, Any]:
    """The form as ApplicationUpdate's changes, or FormError naming each field refused."""
    errors: dict[str, str] = {}
    data: dict[str, Any] = {
        "name": fields.get("name", ""),
        "platform": fields.get("platform", ""),
        "bundleId": fields.get("bundleId", "").strip() or None,  # empty clears it
    }
    try:
        parse_form(ApplicationUpdate, data)
    except FormError as exc:
        errors |= {k: SENTENCES.get(k, _sentence(v)) for k, v in exc.by_field.items()}
    retention = {"keepLast": _number(fields.get("keepLast", "")),
                 "keepDays": _number(fields.get("keepDays", ""))}  # fmt: skip
    try:
        parse_form(RetentionRule, retention)
    except FormError as exc:
        errors |= {k: SENTENCES[k] for k in exc.by_field if k in SENTENCES}
    if errors:
        raise FormError(errors)
    body = parse_form(ApplicationUpdate, data | {"retention": retention})
    return body.model_dump(exclude_unset=True)


def _sentence(message: str) -> str:
    """A schema's message about a name ("cannot be blank") as a sentence about it."""
    message = message.replace("String should", "The name should")
    if not message.startswith("The "):
        message = f"The name {message}"
    return message.rstrip(".") + "."


@router.post("/projects/{project_id}/apps/{app_id}/settings")
async def save_settings(request: Request, project_id: str, app_id: str) -> Response:
    visitor, db, access = await visit_application(request, project_id, app_id, ProjectRole.ADMIN)
    fields = await form_fields(request)
    try:
        changes = _changes(fields)
        view = await application_service(get_context(request), db).update(
            access.application, changes
        )
    except FormError as exc:
        return await render_settings(request, visitor, db, project_id, app_id, "settings",
                                     fields, exc.by_field, 422)  # fmt: skip
    except Conflict as exc:  # the name is taken: refused before anything was written
        return await render_settings(request, visitor, db, project_id, app_id, "settings",
                                     fields, {"name": exc.detail + "."},
                                     exc.status)  # fmt: skip
    warning = rename_warning(access.application, view.application)
    visitor.tell(f"Settings saved. {warning}" if warning else "Settings saved.")
    return see_other(settings_path(project_id, app_id))


@router.post("/projects/{project_id}/apps/{app_id}/delete")
async def delete_application(request: Request, project_id: str, app_id: str) -> Response:
    visitor, db, access = await visit_application(request, project_id, app_id, ProjectRole.ADMIN)
    fields = await form_fields(request)
    name = access.application.name
    if fields.get("confirm", "").strip() != name:
        errors = {"confirm": "Type the application's name exactly to delete it."}
        return await render_settings(request, visitor, db, project_id, app_id, "delete",
                                     fields, errors, 422)  # fmt: skip
    await application_service(get_context(request), db).delete(
        access.application, get_context(request).storage
    )
    visitor.tell(f"Deleted {name} and its builds.")
    return see_other(f"/projects/{project_id}")

"""The console: an application's settings page (admin+, as the API's PUT and DELETE of an
application): its name, platform, bundle id, version policy, retention, distribution, and
deleting it."""

from __future__ import annotations

import hashlib
from typing import Any
from urllib.parse import urlsplit

from fastapi import APIRouter, Request, Response
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.applications.dependencies import application_service
from buildbay.applications.enums import Platform
from buildbay.applications.schemas import ApplicationUpdate, RetentionRule, retention_policy
from buildbay.applications.service import rename_warning
from buildbay.audit.record import actor_of
from buildbay.builds.records import ReadyBuild
from buildbay.builds.retention import preview as retention_preview
from buildbay.builds.schemas import version_label
from buildbay.console.pages import (
    ConsoleRoute,
    FormError,
    can,
    form_fields,
    page,
    parse_form,
    said,
    see_other,
    visit,
    visit_application,
)
from buildbay.console.session import Visitor
from buildbay.context import AppContext
from buildbay.db.reads import Reads
from buildbay.deps import get_context
from buildbay.distribution.groups import groups_page
from buildbay.errors import Conflict
from buildbay.numbers import whole_number
from buildbay.projects.authorization import application_of
from buildbay.projects.enums import ProjectRole
from buildbay.publishers.reads import publishers_page
from buildbay.publishers.schemas import KNOWN_ISSUERS

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
    "versionPolicy": "Choose whether such builds are taken with a warning or refused.",
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
    settings_error: str | None = None, doomed: list[ReadyBuild] | None = None,
) -> Response:  # fmt: skip
    """The page; after a refused form, `failed` names it ("settings", "delete", "publisher":
    console/trusted_publishers.py) and its fields show `values` and `errors` (the
    distribution form's, console/distribution.py: its one field's `settings_error`).
    `doomed`: the builds the settings form's retention rule deletes, shown for confirmation."""
    reads = Reads.within(db)
    access = await application_of(reads, visitor.principal, project_id, app_id, ProjectRole.ADMIN)
    groups = (await groups_page(reads, access.project, 100, None))[0]
    publishers = (await publishers_page(reads, access.application.id, 100, None))[0]
    return page(
        "console/application_settings.html", visitor, status_code, project=access.project,
        application=access.application, can=can(access.role), platforms=PLATFORMS,
        groups=groups, settings_error=settings_error,
        failed=failed, values=values or {}, errors=errors or {},
        doomed=doomed or [], deletes=deletion_token(doomed) if doomed else None,
        distributed_count=sum(1 for build in doomed or [] if build.distributed),
        count_of=count_of, version_label=version_label, publishers=publishers,
        known_issuers=KNOWN_ISSUERS, public_host=public_host(get_context(request)),
    )  # fmt: skip


def public_host(ctx: AppContext) -> str:
    """The host `buildbay upload` asks its ID token's audience for by default."""
    return urlsplit(ctx.settings.resolved_public_url).hostname or "buildbay"


def _number(text: str) -> int | str | None:
    """A form's number field: empty is None, digits a number, anything else stays text (the
    schema then refuses it)."""
    text = text.strip()
    if not text:
        return None
    found = whole_number(text)
    return text if found is None else found


def _changes(fields: dict[str, str]) -> ApplicationUpdate:
    """The form as an ApplicationUpdate, or FormError naming each field refused."""
    errors: dict[str, str] = {}
    data: dict[str, Any] = {
        "name": fields.get("name", ""),
        "platform": fields.get("platform", ""),
        "bundleId": fields.get("bundleId", "").strip() or None,  # empty clears it
    }
    if "versionPolicy" in fields:  # a radio button: absent only from a form of before it
        data["versionPolicy"] = fields["versionPolicy"]
    try:
        parse_form(ApplicationUpdate, data)
    except FormError as exc:
        errors |= {k: SENTENCES.get(k, _sentence(v)) for k, v in exc.by_field.items()}
    retention = {"keepLast": _number(fields.get("keepLast", "")),
                 "keepDays": _number(fields.get("keepDays", "")),
                 "protect": {"groups": "protectGroups" in fields,
                             "channels": "protectChannels" in fields}}  # fmt: skip
    try:
        parse_form(RetentionRule, retention)
    except FormError as exc:
        errors |= {k: SENTENCES[k] for k in exc.by_field if k in SENTENCES}
    if errors:
        raise FormError(errors)
    body = parse_form(ApplicationUpdate, data | {"retention": retention})
    assert isinstance(body, ApplicationUpdate)
    return body


def _sentence(message: str) -> str:
    """A schema's message about a name ("cannot be blank") as a sentence about it."""
    message = message.replace("String should", "The name should")
    if not message.startswith("The "):
        message = f"The name {message}"
    return message.rstrip(".") + "."


def deletion_token(doomed: list[ReadyBuild]) -> str:
    """What a confirmation of the retention rule confirmed: these builds' deletion (a rule that
    would delete others by the time it is sent, a build come or gone, asks again)."""
    ids = ",".join(build.id for build in doomed)
    return hashlib.sha256(ids.encode()).hexdigest()[:32]


@router.post("/projects/{project_id}/apps/{app_id}/settings")
async def save_settings(request: Request, project_id: str, app_id: str) -> Response:
    """Saved, unless the retention rule deletes builds now and the form did not confirm just
    those: then the page says which (and how many in testers' hands) and asks."""
    visitor, db, access = await visit_application(request, project_id, app_id, ProjectRole.ADMIN)
    fields = await form_fields(request)
    ctx = get_context(request)
    try:
        body = _changes(fields)
        changes = body.model_dump(exclude_unset=True)
        policy = retention_policy(body.retention)
        doomed = await retention_preview(
            Reads.within(db), access.application.id, policy, ctx.clock.now()
        )
        if doomed and fields.get("deletes") != deletion_token(doomed):
            return await render_settings(request, visitor, db, project_id, app_id, "settings",
                                         fields, doomed=doomed)  # fmt: skip
        view = await application_service(ctx, db).update(
            access.application, changes, by=actor_of(access)
        )
    except FormError as exc:
        return await render_settings(request, visitor, db, project_id, app_id, "settings",
                                     fields, exc.by_field, 422)  # fmt: skip
    except Conflict as exc:  # the name is taken: refused before anything was written
        return await render_settings(request, visitor, db, project_id, app_id, "settings",
                                     fields, {"name": said(exc) + "."},
                                     exc.status)  # fmt: skip
    warning = rename_warning(access.application, view.application)
    said_saved = f"Settings saved. {warning}" if warning else "Settings saved."
    if doomed:
        visitor.tell(
            f"{said_saved} The retention rule deletes {count_of(len(doomed), 'build')} on "
            "the sweeper's next round; the application's page lists them once they are gone."
        )
    else:
        visitor.tell(said_saved)
    return see_other(settings_path(project_id, app_id))


def count_of(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


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
        access.application, get_context(request).storage, by=actor_of(access)
    )
    visitor.tell(f"Deleted {name} and its builds.")
    return see_other(f"/projects/{project_id}")

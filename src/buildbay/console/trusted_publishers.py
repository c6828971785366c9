"""The console: an application's trusted publishers, on its settings page (admin+, as the
API's): the form that adds one (a known issuer or another, a subject pattern, an audience) and
the button that removes one. The rules are the service's (publishers/service.py)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from buildbay.auth.dependencies import origin_of
from buildbay.console.application_settings import render_settings, settings_path
from buildbay.console.pages import (
    ConsoleRoute,
    FormError,
    form_fields,
    parse_form,
    see_other,
    visit_application,
)
from buildbay.deps import get_context
from buildbay.errors import Conflict, NotFound, ValidationFailed
from buildbay.projects.enums import ProjectRole
from buildbay.publishers.dependencies import publisher_service
from buildbay.publishers.schemas import KNOWN_ISSUERS, TrustedPublisherCreate

router = APIRouter(route_class=ConsoleRoute, include_in_schema=False)

OTHER_ISSUER = "other"
SENTENCES = {
    "issuer": "Choose GitHub Actions or GitLab.com, or enter your issuer's https:// address "
    "(no spaces, at most 255 characters).",
    "subjectPattern": "Enter a subject pattern such as repo:acme/shop:ref:refs/heads/main "
    "(no spaces, at most 500 characters).",
    "audience": "Enter the audience your CI asks its token for, such as this server's host "
    "name (no spaces, at most 255 characters).",
}


def _issuer(fields: dict[str, str]) -> str:
    chosen = fields.get("issuer", "")
    if chosen == OTHER_ISSUER:
        return fields.get("customIssuer", "").strip()
    return chosen if chosen in KNOWN_ISSUERS.values() else ""


@router.post("/projects/{project_id}/apps/{app_id}/trusted-publishers")
async def add_publisher(request: Request, project_id: str, app_id: str) -> Response:
    visitor, db, access = await visit_application(request, project_id, app_id, ProjectRole.ADMIN)
    fields = await form_fields(request)
    data = {
        "issuer": _issuer(fields),
        "subjectPattern": fields.get("subjectPattern", "").strip(),
        "audience": fields.get("audience", "").strip(),
    }
    service = publisher_service(get_context(request), db)
    try:
        body = parse_form(TrustedPublisherCreate, data)
        assert isinstance(body, TrustedPublisherCreate)
        await service.add(
            access, body.issuer, body.subject_pattern, body.audience, origin_of(request)
        )
    except FormError as exc:
        errors = {k: SENTENCES.get(k, v) for k, v in exc.by_field.items()}
        return await render_settings(request, visitor, db, project_id, app_id, "publisher",
                                     fields, errors, 422)  # fmt: skip
    except ValidationFailed as exc:  # the issuer's address or the pattern's rules
        errors = {e.field: _sentence(e.message) for e in exc.errors or []}
        return await render_settings(request, visitor, db, project_id, app_id, "publisher",
                                     fields, errors, 422)  # fmt: skip
    except Conflict as exc:
        return await render_settings(request, visitor, db, project_id, app_id, "publisher",
                                     fields, {"subjectPattern": exc.detail + "."},
                                     exc.status)  # fmt: skip
    visitor.tell(
        f"Added a trusted publisher: CI jobs of {body.subject_pattern} can now upload builds."
    )
    return see_other(settings_path(project_id, app_id) + "#trusted-publishers")


@router.post("/projects/{project_id}/apps/{app_id}/trusted-publishers/{publisher_id}/delete")
async def remove_publisher(
    request: Request, project_id: str, app_id: str, publisher_id: str
) -> Response:
    visitor, db, access = await visit_application(request, project_id, app_id, ProjectRole.ADMIN)
    await form_fields(request)  # the CSRF token
    try:
        await publisher_service(get_context(request), db).remove(
            access, publisher_id, origin_of(request)
        )
    except NotFound:
        visitor.tell("That trusted publisher was already removed.")
    else:
        visitor.tell("Removed the trusted publisher: its CI jobs can no longer upload.")
    return see_other(settings_path(project_id, app_id) + "#trusted-publishers")


def _sentence(message: str) -> str:
    message = message.replace("subjectPattern: ", "The subject pattern: ")
    return message[0].upper() + message[1:].rstrip(".") + "."

"""The console: invitations. Sending, resending and revoking them from the project page; the
page an invitation's link opens, where the invited person signs up or signs in, then accepts
(or declines); and the Accept and Decline of the invitations listed on a signed-in person's
projects page. A link that is no longer valid gets a page that says what to do, to someone
without an account too."""

from __future__ import annotations

from urllib.parse import quote

from fastapi import APIRouter, Request, Response
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.audit.record import actor_of
from buildbay.console.pages import (
    ConsoleRoute,
    FormError,
    form_fields,
    page,
    parse_form,
    said,
    see_other,
    visit,
)
from buildbay.console.projects import render_project
from buildbay.console.session import Visitor
from buildbay.db.reads import Reads
from buildbay.deps import get_context
from buildbay.errors import BuildbayError, NotFound, ValidationFailed
from buildbay.invitations.dependencies import invitation_service
from buildbay.invitations.enums import InvitationStatus
from buildbay.invitations.schemas import InvitationCreate
from buildbay.invitations.service import INVITATION_PAGE
from buildbay.projects.authorization import project_of
from buildbay.projects.enums import ProjectRole

router = APIRouter(route_class=ConsoleRoute, include_in_schema=False)


@router.post("/projects/{project_id}/invitations")
async def invite(request: Request, project_id: str) -> Response:
    visitor, db = await visit(request)
    access = await project_of(Reads.within(db), visitor.principal, project_id, ProjectRole.ADMIN)
    fields = await form_fields(request)
    service = invitation_service(get_context(request), db)
    try:
        body = parse_form(InvitationCreate, {"email": fields.get("email", ""),
                                             "role": fields.get("role", "tester")})  # fmt: skip
        assert isinstance(body, InvitationCreate)
        async with db.begin_nested():  # a refusal takes back what it wrote, and only that
            invitation = await service.invite(access, str(body.email), body.role)
    except FormError as exc:
        error = exc.by_field.get("email") or exc.by_field.get("role") or "Choose a role."
        return await render_project(request, visitor, db, project_id, "invite", fields,
                                    {"email": error}, 422)  # fmt: skip
    except BuildbayError as exc:
        if exc.status >= 500:
            raise
        return await render_project(request, visitor, db, project_id, "invite", fields,
                                    {"email": said(exc)}, exc.status)  # fmt: skip
    visitor.tell(f"Invitation sent to {invitation.email}.")
    return see_other(f"/projects/{project_id}#invitations")


@router.post("/projects/{project_id}/invitations/{invitation_id}/resend")
async def resend(request: Request, project_id: str, invitation_id: str) -> Response:
    visitor, db = await visit(request)
    access = await project_of(Reads.within(db), visitor.principal, project_id, ProjectRole.ADMIN)
    try:
        async with db.begin_nested():
            invitation = await invitation_service(get_context(request), db).resend(
                access, invitation_id
            )
    except BuildbayError as exc:
        if exc.status >= 500 or exc.status == 404:
            raise
        # A cap or a block: said where invitations are sent, nothing sent.
        return await render_project(request, visitor, db, project_id, "invite", {},
                                    {"email": said(exc)}, exc.status)  # fmt: skip
    visitor.tell(
        f"Invitation sent again to {invitation.email}. The link of the earlier mail still works."
    )
    return see_other(f"/projects/{project_id}#invitations")


@router.post("/projects/{project_id}/invitations/{invitation_id}/revoke")
async def revoke(request: Request, project_id: str, invitation_id: str) -> Response:
    visitor, db = await visit(request)
    access = await project_of(Reads.within(db), visitor.principal, project_id, ProjectRole.ADMIN)
    await invitation_service(get_context(request), db).revoke(
        access.project, invitation_id, by=actor_of(access)
    )
    return see_other(f"/projects/{project_id}#invitations")


@router.get(INVITATION_PAGE + "/{token}")
async def invitation_page(request: Request, token: str) -> Response:
    visitor, db = await visit(request, signed_in=False)
    return await _invitation(request, visitor, db, token)


async def _invitation(
    request: Request, visitor: Visitor, db: AsyncSession, token: str,
    error: str | None = None, status_code: int = 200,
) -> Response:  # fmt: skip
    try:
        view = await invitation_service(get_context(request), db).view(token)
    except NotFound:
        # Never sent, or replaced before earlier links were kept: what to do, not a dead end.
        return page("console/invitation_gone.html", visitor, 404)
    here = f"{INVITATION_PAGE}/{token}"
    email = visitor.user.email if visitor.user else None
    return page(
        "console/invitation.html", visitor, status_code, view=view, here=here, error=error,
        pending=view.status is InvitationStatus.PENDING,
        matches=email == view.invitation.email, next=quote(here, safe="/"),
        email=quote(view.invitation.email),
    )  # fmt: skip


@router.post(INVITATION_PAGE + "/{token}/accept")
async def accept(request: Request, token: str) -> Response:
    visitor, db = await visit(request, signed_in=False)
    if visitor.user is None:
        return see_other(f"{INVITATION_PAGE}/{token}")
    service = invitation_service(get_context(request), db)
    try:
        async with db.begin_nested():  # a refused accept takes back its claim
            joined = await service.accept(visitor.principal, token)
    except BuildbayError as exc:
        if exc.status >= 500 or exc.status == 404:
            raise
        return await _invitation(request, visitor, db, token, said(exc), exc.status)
    visitor.tell("Welcome: you are a member of this project now.")
    return see_other(f"/projects/{joined.project_id}")


@router.post(INVITATION_PAGE + "/{token}/decline")
async def decline(request: Request, token: str) -> Response:
    visitor, db = await visit(request, signed_in=False)
    if visitor.user is None:
        return see_other(f"{INVITATION_PAGE}/{token}")
    service = invitation_service(get_context(request), db)
    try:
        async with db.begin_nested():
            await service.decline(visitor.principal, token=token)
    except BuildbayError as exc:
        if exc.status >= 500 or exc.status == 404:
            raise
        return await _invitation(request, visitor, db, token, exc.detail, exc.status)
    visitor.tell("Invitation declined.")
    return see_other("/projects")


@router.post("/account/invitations/{invitation_id}/accept")
async def accept_received(request: Request, invitation_id: str) -> Response:
    """Accept one of the invitations the projects page lists (no link needed)."""
    visitor, db = await visit(request)
    service = invitation_service(get_context(request), db)
    try:
        async with db.begin_nested():
            joined = await service.accept_received(visitor.principal, invitation_id)
    except BuildbayError as exc:
        if exc.status >= 500:
            raise
        visitor.tell(_taken_sentence(exc))
        return see_other("/projects")
    visitor.tell("Welcome: you are a member of this project now.")
    return see_other(f"/projects/{joined.project_id}")


@router.post("/account/invitations/{invitation_id}/decline")
async def decline_received(request: Request, invitation_id: str) -> Response:
    visitor, db = await visit(request)
    service = invitation_service(get_context(request), db)
    try:
        async with db.begin_nested():
            await service.decline(visitor.principal, invitation_id=invitation_id)
    except BuildbayError as exc:
        if exc.status >= 500:
            raise
        visitor.tell(_taken_sentence(exc))
        return see_other("/projects")
    visitor.tell("Invitation declined.")
    return see_other("/projects")


def _taken_sentence(exc: BuildbayError) -> str:
    """A refused Accept or Decline of the projects page, as a sentence for its notice."""
    if isinstance(exc, ValidationFailed):
        return (
            "This invitation can no longer be answered: it was withdrawn, answered already or "
            "has expired."
        )
    return exc.detail

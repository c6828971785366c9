"""The console: invitations. Sending, resending and revoking them from the project page, and the
page an invitation's link opens, where the invited person signs up or signs in, then accepts."""

from __future__ import annotations

from urllib.parse import quote

from fastapi import APIRouter, Request, Response
from sqlalchemy.ext.asyncio import AsyncSession

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
from buildbay.errors import BuildbayError
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
    visitor.tell(f"Invitation sent again to {invitation.email}.")
    return see_other(f"/projects/{project_id}#invitations")


@router.post("/projects/{project_id}/invitations/{invitation_id}/revoke")
async def revoke(request: Request, project_id: str, invitation_id: str) -> Response:
    visitor, db = await visit(request)
    access = await project_of(Reads.within(db), visitor.principal, project_id, ProjectRole.ADMIN)
    await invitation_service(get_context(request), db).revoke(access.project, invitation_id)
    return see_other(f"/projects/{project_id}#invitations")


@router.get(INVITATION_PAGE + "/{token}")
async def invitation_page(request: Request, token: str) -> Response:
    visitor, db = await visit(request, signed_in=False)
    return await _invitation(request, visitor, db, token)


async def _invitation(
    request: Request, visitor: Visitor, db: AsyncSession, token: str,
    error: str | None = None, status_code: int = 200,
) -> Response:  # fmt: skip
    view = await invitation_service(get_context(request), db).view(token)
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

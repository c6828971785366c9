"""The console: projects, their members and the creation of applications."""

from __future__ import annotations

from dataclasses import replace

from fastapi import APIRouter, Request, Response
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.applications.dependencies import application_service
from buildbay.applications.enums import Platform
from buildbay.applications.reads import applications_page
from buildbay.applications.schemas import ApplicationCreate
from buildbay.audit.record import actor_of
from buildbay.console.pages import (
    ROLES,
    ConsoleRoute,
    FormError,
    can,
    form_fields,
    now,
    page,
    parse_form,
    said,
    see_other,
    visit,
)
from buildbay.console.session import Visitor
from buildbay.db.reads import Reads
from buildbay.deps import get_context
from buildbay.errors import BuildbayError, Conflict
from buildbay.invitations.dependencies import invitation_service
from buildbay.invitations.reads import invitations_of
from buildbay.projects.authorization import only_a_tester, project_of, sees_addresses, tester_of
from buildbay.projects.dependencies import project_service
from buildbay.projects.enums import ProjectRole
from buildbay.projects.reads import members, project_view, projects_of_member, roles_of_user
from buildbay.projects.schemas import MemberCreate, MemberUpdate, ProjectWrite
from buildbay.words import role_word

router = APIRouter(route_class=ConsoleRoute, include_in_schema=False)


@router.get("/projects")
async def projects_page(request: Request) -> Response:
    visitor, db = await visit(request)
    return await _projects(request, visitor, db, {}, {})


async def _projects(
    request: Request, visitor: Visitor, db: AsyncSession, values: dict[str, str],
    errors: dict[str, str], status_code: int = 200,
) -> Response:  # fmt: skip
    assert visitor.user is not None
    reads = Reads.within(db)
    rows, _ = await projects_of_member(reads, visitor.user.id, 100, None)
    roles = await roles_of_user(reads, visitor.user.id)
    # Someone invited to test came for the builds: no "start a project" welcome; making a
    # project of their own stays possible, folded away.
    tester_only = only_a_tester(roles.values())
    invitations = invitation_service(get_context(request), db)
    received = await invitations.received(visitor.principal)
    return page("console/projects.html", visitor, status_code, projects=rows, values=values,
                 errors=errors, roles=roles, tester_only=tester_only, received=received,
                 waiting=not received and await invitations.waiting_unverified(visitor.principal),
                 welcome=request.query_params.get("welcome") and not rows)  # fmt: skip


@router.post("/projects")
async def create_project(request: Request) -> Response:
    visitor, db = await visit(request)
    fields = await form_fields(request)
    try:
        body = parse_form(ProjectWrite, {"name": fields.get("name", "")})
    except FormError as exc:
        return await _projects(request, visitor, db, fields, exc.by_field, 422)
    assert isinstance(body, ProjectWrite)
    assert visitor.user is not None
    try:
        view = await project_service(get_context(request), db).create(visitor.user, body.name)
    except Conflict as exc:  # a name taken: refused before anything was written
        return await _projects(request, visitor, db, fields, {"name": said(exc)}, exc.status)
    return see_other(f"/projects/{view.project.id}")


@router.get("/projects/{project_id}")
async def project_page(request: Request, project_id: str) -> Response:
    visitor, db = await visit(request)
    return await render_project(request, visitor, db, project_id)


async def render_project(
    request: Request, visitor: Visitor, db: AsyncSession, project_id: str,
    failed: str | None = None, values: dict[str, str] | None = None,
    errors: dict[str, str] | None = None, status_code: int = 200,
) -> Response:  # fmt: skip
    """The project page; after a refused form, `failed` names it ("app", "member", "invite",
    "rename", "delete") and its fields show `values` and `errors`."""
    reads = Reads.within(db)
    access = await project_of(reads, visitor.principal, project_id, ProjectRole.TESTER)
    view = await project_view(reads, access.project)
    viewer = tester_of(access)
    applications, _ = await applications_page(reads, access.project.id, 100, None, viewer)
    found = await members(reads, access.project.id)
    addresses = sees_addresses(access.role)
    invitations = []
    if access.role.includes(ProjectRole.ADMIN):
        at = now(request)
        invitations = [(i, i.status_at(at)) for i in await invitations_of(reads, access.project.id)]
    return page(
        "console/project.html", visitor, status_code, project=view.project, role=access.role,
        can=can(access.role), roles=ROLES, applications=applications,
        members=found if addresses else [replace(m, email="") for m in found],
        addresses=addresses,
        invitations=invitations, failed=failed, values=values or {}, errors=errors or {},
        owners_count=sum(m.role is ProjectRole.OWNER for m in found),
        platforms=_PLATFORMS,
        sso_name=ctx.sso.config.name if (ctx := get_context(request)).sso is not None else None,
    )  # fmt: skip


_PLATFORMS = [platform.value for platform in Platform]


@router.post("/projects/{project_id}/rename")
async def rename_project(request: Request, project_id: str) -> Response:
    visitor, db = await visit(request)
    access = await project_of(Reads.within(db), visitor.principal, project_id, ProjectRole.ADMIN)
    fields = await form_fields(request)
    try:
        body = parse_form(ProjectWrite, {"name": fields.get("name", "")})
    except FormError as exc:
        errors = {"name": exc.by_field.get("name", "Not a valid name")}
        return await render_project(request, visitor, db, project_id, "rename", fields, errors, 422)
    assert isinstance(body, ProjectWrite)
    try:
        await project_service(get_context(request), db).rename(
            access.project, body.name, by=actor_of(access)
        )
    except Conflict as exc:
        return await render_project(
            request, visitor, db, project_id, "rename", fields, {"name": said(exc)}, exc.status
        )
    return see_other(f"/projects/{project_id}")


@router.post("/projects/{project_id}/delete")
async def delete_project(request: Request, project_id: str) -> Response:
    visitor, db = await visit(request)
    access = await project_of(Reads.within(db), visitor.principal, project_id, ProjectRole.OWNER)
    fields = await form_fields(request)
    if fields.get("confirm", "").strip() != access.project.name:
        errors = {"confirm": "Type the project's name exactly to delete it"}
        return await render_project(request, visitor, db, project_id, "delete", fields, errors, 422)
    ctx = get_context(request)
    await project_service(ctx, db).delete(access.project, ctx.storage, by=actor_of(access))
    return see_other("/projects")


@router.post("/projects/{project_id}/applications")
async def create_application(request: Request, project_id: str) -> Response:
    visitor, db = await visit(request)
    access = await project_of(Reads.within(db), visitor.principal, project_id, ProjectRole.ADMIN)
    fields = await form_fields(request)
    data = {"name": fields.get("name", ""), "platform": fields.get("platform") or "other"}
    if fields.get("bundleId"):
        data["bundleId"] = fields["bundleId"]
    try:
        body = parse_form(ApplicationCreate, data)
    except FormError as exc:
        return await render_project(
            request, visitor, db, project_id, "app", fields, exc.by_field, 422
        )
    assert isinstance(body, ApplicationCreate)
    try:
        view = await application_service(get_context(request), db).create(
            access.project, body.model_dump(), by=actor_of(access)
        )
    except Conflict as exc:
        return await render_project(
            request, visitor, db, project_id, "app", fields, {"name": said(exc)}, exc.status
        )
    return see_other(f"/projects/{project_id}/apps/{view.application.id}")


@router.post("/projects/{project_id}/members")
async def add_member(request: Request, project_id: str) -> Response:
    visitor, db = await visit(request)
    access = await project_of(Reads.within(db), visitor.principal, project_id, ProjectRole.ADMIN)
    fields = await form_fields(request)
    try:
        body = parse_form(MemberCreate, {"email": fields.get("email", ""),
                                     "role": fields.get("role", "tester")})  # fmt: skip
        assert isinstance(body, MemberCreate)
        # Unverified addresses are added only once the admin says so (a second step).
        await project_service(get_context(request), db).add_member(
            access, str(body.email), body.role, unverified_ok=fields.get("unverifiedOk") == "on"
        )
    except FormError as exc:
        errors = {"email": exc.by_field.get("email") or exc.by_field.get("role") or "Not valid"}
        return await render_project(request, visitor, db, project_id, "member", fields, errors, 422)
    except BuildbayError as exc:
        # Refused before anything was written (unknown e-mail, already a member, the owner
        # role): the page is shown again with the reason beside the field.
        if exc.status >= 500:
            raise
        if exc.code == "user_not_found":  # nobody to add: offered an invitation instead
            nobody = {"email": NO_ACCOUNT, "invite": "yes"}
            return await render_project(
                request, visitor, db, project_id, "member", fields, nobody, exc.status
            )
        if exc.code == "email_not_verified":
            unverified = {"unverified": said(exc)}
            return await render_project(
                request, visitor, db, project_id, "member", fields, unverified, exc.status
            )
        return await render_project(request, visitor, db, project_id, "member", fields,
                              {"email": said(exc)}, exc.status)  # fmt: skip
    return see_other(f"/projects/{project_id}#members")


NO_ACCOUNT = (
    "No Buildbay account has this e-mail yet. Invite them instead: the invitation's mail lets "
    "them create an account and join."
)


@router.post("/projects/{project_id}/members/{user_id}/role")
async def change_role(request: Request, project_id: str, user_id: str) -> Response:
    visitor, db = await visit(request)
    access = await project_of(Reads.within(db), visitor.principal, project_id, ProjectRole.ADMIN)
    fields = await form_fields(request)
    try:
        body = parse_form(MemberUpdate, {"role": fields.get("role", "")})
    except FormError:
        errors = {"email": f"Choose one of the roles: {', '.join(map(role_word, ROLES))}."}
        return await render_project(request, visitor, db, project_id, "member", {}, errors, 422)
    assert isinstance(body, MemberUpdate)
    await project_service(get_context(request), db).change_role(access, user_id, body.role)
    return see_other(f"/projects/{project_id}#members")


@router.post("/projects/{project_id}/members/{user_id}/remove")
async def remove_member(request: Request, project_id: str, user_id: str) -> Response:
    visitor, db = await visit(request)
    reads = Reads.within(db)
    access = await project_of(reads, visitor.principal, project_id, ProjectRole.TESTER)
    await project_service(get_context(request), db).remove_member(access, user_id)
    assert visitor.user is not None
    if user_id == visitor.user.id:
        return see_other("/projects")  # left the project
    return see_other(f"/projects/{project_id}#members")

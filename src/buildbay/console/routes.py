"""The web console: server-rendered pages under `/` for people (the API stays under `/api`).

Every page calls the same services as the API, never its HTTP endpoints, through the same
authorization rules (projects/access.py): a tester sees no delete button, and the server
refuses the action anyway. Forms post back with a CSRF token (console/session.py); errors are
shown next to the field that caused them.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from datetime import timedelta
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse, RedirectResponse
from pydantic import BaseModel
from pydantic import ValidationError as ModelError
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.applications.models import Platform
from buildbay.applications.schemas import ApplicationCreate
from buildbay.applications.service import ApplicationService
from buildbay.auth.dependencies import client_ip, count_request, limit_by_ip, make_auth_service
from buildbay.auth.schemas import CreateApiTokenRequest, LoginRequest, RegisterRequest
from buildbay.builds.install import InstallLinks
from buildbay.builds.schemas import (
    DEFAULT_HOURS,
    MAX_NOTES_LENGTH,
    UploadLinkRequest,
    VerifyRequest,
    version_label,
)
from buildbay.builds.service import BuildOrder, BuildService, human_size, storage_usage
from buildbay.console.session import CSRF_FIELD, CSRF_HEADER, ConsoleSessions, Visitor
from buildbay.deps import AppContext, TransactionRoute, get_context, request_session
from buildbay.errors import (
    BadRequest,
    BuildbayError,
    NotAuthenticated,
    PayloadTooLarge,
    ValidationFailed,
)
from buildbay.numbers import whole_number
from buildbay.projects.access import application_of, project_of
from buildbay.projects.models import ProjectRole
from buildbay.projects.schemas import MemberCreate, MemberUpdate, ProjectWrite
from buildbay.projects.service import ProjectService
from buildbay.templates import CONSOLE, render

ROLES = [role.value for role in ProjectRole]


class ConsoleRoute(TransactionRoute):
    """A console page: the request's transaction as for the API; a visitor who is not signed in
    goes to the login page; any other refusal is an HTML page with its status; the visitor's
    cookies are set on whatever is answered."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def page(request: Request) -> Response:
            try:
                response = await handler(request)
            except NotAuthenticated:
                target = quote(request.url.path, safe="/")
                response = RedirectResponse(f"/login?next={target}", status_code=303)
            except BuildbayError as exc:
                response = render(
                    "console/error.html",
                    exc.status,
                    headers=CONSOLE | exc.headers,
                    title=_error_title(exc.status),
                    detail=exc.detail,
                    visitor=request.scope.get("buildbay.visitor"),
                )
            visitor: Visitor | None = request.scope.get("buildbay.visitor")
            if visitor is not None:
                sessions(request).apply(visitor, response)
            return response

        return page


def _error_title(status: int) -> str:
    return {403: "Not allowed", 404: "Not found", 409: "Not possible now", 413: "Too large",
            429: "Too many requests"}.get(status, "Something went wrong")  # fmt: skip


router = APIRouter(route_class=ConsoleRoute, include_in_schema=False)


def sessions(request: Request) -> ConsoleSessions:
    console: ConsoleSessions = request.app.state.console
    return console


MAX_FORM_BYTES = 64 * 1024


async def _visit(request: Request, *, signed_in: bool = True) -> tuple[Visitor, AsyncSession]:
    """The visitor (signed in, unless `signed_in` is False) and the request's session. A POST
    is checked before its body is read (origin, size), then counted against the rate limit as
    an API request would be, then its CSRF token is checked."""
    ctx = get_context(request)
    db = request_session(request)
    console = sessions(request)
    if request.method == "POST":
        console.check_origin(request, ctx.settings.resolved_public_url)
    visitor = await console.visitor(request, db, ctx.clock.now())
    request.scope["buildbay.visitor"] = visitor
    if request.method == "POST":
        if visitor.user is None:
            await limit_by_ip(ctx, request)
        else:
            await count_request(ctx, request, f"user:{visitor.user.id}", visitor.user.plan)
        sent = request.headers.get(CSRF_HEADER)
        if sent is None:
            sent = str((await _form(request)).get(CSRF_FIELD) or "")
        console.check_csrf(visitor, sent)
    if signed_in and visitor.user is None:
        raise NotAuthenticated("Sign in to continue")
    return visitor, db


async def _form(request: Request) -> Any:
    """The posted form: URL-encoded only (no file parts) and at most MAX_FORM_BYTES."""
    if not request.headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
        raise BadRequest("Send the form as application/x-www-form-urlencoded")
    length = whole_number(request.headers.get("content-length", ""), max_digits=20)
    if length is None or length > MAX_FORM_BYTES:
        raise PayloadTooLarge(f"A form is at most {MAX_FORM_BYTES} bytes, with a Content-Length")
    return await request.form()


async def _fields(request: Request) -> dict[str, str]:
    form = await _form(request)
    return {k: str(v) for k, v in form.items() if k != CSRF_FIELD and isinstance(v, str)}


def _errors(exc: ModelError) -> dict[str, str]:
    """Pydantic's errors by field (the API's camelCase names), as one sentence each."""
    found: dict[str, str] = {}
    for error in exc.errors():
        name = str(error["loc"][0]) if error["loc"] else "form"
        found.setdefault(name, error["msg"].removeprefix("Value error, "))
    return found


def _parse(model: type[BaseModel], data: dict[str, Any]) -> BaseModel:
    try:
        return model.model_validate(data)
    except ModelError as exc:
        raise _FormError(_errors(exc)) from None


class _FormError(ValidationFailed):
    """A form's fields that do not validate; pages that have the form show them beside it."""

    def __init__(self, errors: dict[str, str]) -> None:
        super().__init__("; ".join(f"{k}: {v}" for k, v in errors.items()))
        self.by_field = errors


def _can(role: ProjectRole) -> Callable[[str], bool]:
    """For templates: whether the visitor's role includes the one named."""
    return lambda needed: role.includes(ProjectRole(needed))


def _page(template: str, visitor: Visitor, status_code: int = 200, **context: Any) -> Response:
    return render(template, status_code, headers=CONSOLE, visitor=visitor, **context)


def _see_other(url: str) -> RedirectResponse:
    return RedirectResponse(url, status_code=303)


def _safe_next(target: str | None) -> str:
    """Only a path of this site: never an open redirect."""
    if target and target.startswith("/") and not target.startswith("//") and "\\" not in target:
        return target
    return "/projects"


def _now(request: Request) -> Any:
    return get_context(request).clock.now()


# -- signing up, in and out ---------------------------------------------------------------------


@router.get("/")
async def home(request: Request) -> Response:
    visitor, _ = await _visit(request, signed_in=False)
    return _see_other("/projects" if visitor.user else "/login")


@router.get("/login")
async def login_page(request: Request) -> Response:
    visitor, _ = await _visit(request, signed_in=False)
    next_page = _safe_next(request.query_params.get("next"))
    if visitor.user is not None:
        return _see_other(next_page)
    return _page("console/login.html", visitor, next=next_page, values={}, errors={},
                 signed_out=request.query_params.get("signed_out"))  # fmt: skip


@router.post("/login")
async def login(request: Request) -> Response:
    visitor, db = await _visit(request, signed_in=False)
    fields = await _fields(request)
    next_page = _safe_next(fields.get("next"))
    values = {"email": fields.get("email", "")}
    ctx = get_context(request)
    try:
        body = _parse(LoginRequest, {k: fields.get(k, "") for k in ("email", "password")})
        assert isinstance(body, LoginRequest)
        service = make_auth_service(ctx, db)
        issued = await service.login(body.email, body.password, client_ip(request), ctx.limiter)
    except _FormError as exc:
        return _page("console/login.html", visitor, 422, next=next_page, values=values,
                     errors=exc.by_field)  # fmt: skip
    except BuildbayError as exc:
        status = exc.status if exc.status in (401, 429) else 400
        page = _page("console/login.html", visitor, status, next=next_page, values=values,
                     errors={"form": exc.detail})  # fmt: skip
        page.headers.update(exc.headers)  # Retry-After, when throttled
        return page
    if visitor.session_id is not None:  # signing in again: the old login ends
        await make_auth_service(ctx, db).end_session(visitor.session_id)
    await sessions(request).sign_in(visitor, db, issued.session_id, _now(request))
    return _see_other(next_page)


@router.get("/signup")
async def signup_page(request: Request) -> Response:
    visitor, _ = await _visit(request, signed_in=False)
    return _page("console/signup.html", visitor, values={}, errors={})


@router.post("/signup")
async def signup(request: Request) -> Response:
    visitor, db = await _visit(request, signed_in=False)
    fields = await _fields(request)
    values = {"email": fields.get("email", ""), "name": fields.get("name", "")}
    try:
        body = _parse(RegisterRequest, {k: fields.get(k) or None for k in ("email", "name")}
                      | {"password": fields.get("password", "")})  # fmt: skip
        assert isinstance(body, RegisterRequest)
        issued = await make_auth_service(get_context(request), db).register(
            body.email, body.password, body.name
        )
    except _FormError as exc:
        return _page("console/signup.html", visitor, 422, values=values, errors=exc.by_field)
    except BuildbayError as exc:
        await db.rollback()  # a concurrent sign-up's failed flush: nothing of this one stays
        errors = {"email": exc.detail} if exc.code == "email_taken" else {"form": exc.detail}
        return _page("console/signup.html", visitor, exc.status, values=values, errors=errors)
    await sessions(request).sign_in(visitor, db, issued.session_id, _now(request))
    return _see_other("/projects?welcome=1")


@router.post("/logout")
async def logout(request: Request) -> Response:
    visitor, db = await _visit(request, signed_in=False)
    if visitor.session_id is not None:
        await make_auth_service(get_context(request), db).end_session(visitor.session_id)
    sessions(request).sign_out(visitor)
    return _see_other("/login?signed_out=1")


# -- projects -----------------------------------------------------------------------------------


@router.get("/projects")
async def projects_page(request: Request) -> Response:
    visitor, db = await _visit(request)
    return await _projects(request, visitor, db, {}, {})


async def _projects(
    request: Request, visitor: Visitor, db: AsyncSession, values: dict[str, str],
    errors: dict[str, str], status_code: int = 200,
) -> Response:  # fmt: skip
    assert visitor.user is not None
    service = ProjectService(db, _now(request))
    rows, _ = await service.list_for(visitor.user, 100, None)
    return _page("console/projects.html", visitor, status_code, projects=rows, values=values,
                 errors=errors, welcome=request.query_params.get("welcome"))  # fmt: skip


@router.post("/projects")
async def create_project(request: Request) -> Response:
    visitor, db = await _visit(request)
    fields = await _fields(request)
    try:
        body = _parse(ProjectWrite, {"name": fields.get("name", "")})
    except _FormError as exc:
        return await _projects(request, visitor, db, fields, exc.by_field, 422)
    assert isinstance(body, ProjectWrite)
    assert visitor.user is not None
    view = await ProjectService(db, _now(request)).create(visitor.user, body.name)
    return _see_other(f"/projects/{view.project.id}")


@router.get("/projects/{project_id}")
async def project_page(request: Request, project_id: str) -> Response:
    visitor, db = await _visit(request)
    return await _project(request, visitor, db, project_id)


async def _project(
    request: Request, visitor: Visitor, db: AsyncSession, project_id: str,
    failed: str | None = None, values: dict[str, str] | None = None,
    errors: dict[str, str] | None = None, status_code: int = 200,
) -> Response:  # fmt: skip
    """The project page; after a refused form, `failed` names it ("app", "member", "rename",
    "delete") and its fields show `values` and `errors`."""
    access = await project_of(db, visitor.principal, project_id, ProjectRole.TESTER)
    projects = ProjectService(db, _now(request))
    view = await projects.view(access.project)
    applications, _ = await ApplicationService(db, _now(request)).list(access.project, 100, None)
    members = await projects.members(access.project)
    return _page(
        "console/project.html", visitor, status_code, project=view.project, role=access.role,
        can=_can(access.role), roles=ROLES, applications=applications, members=members,
        failed=failed, values=values or {}, errors=errors or {}, platforms=_PLATFORMS,
    )  # fmt: skip


_PLATFORMS = [platform.value for platform in Platform]


@router.post("/projects/{project_id}/rename")
async def rename_project(request: Request, project_id: str) -> Response:
    visitor, db = await _visit(request)
    access = await project_of(db, visitor.principal, project_id, ProjectRole.ADMIN)
    fields = await _fields(request)
    try:
        body = _parse(ProjectWrite, {"name": fields.get("name", "")})
    except _FormError as exc:
        errors = {"name": exc.by_field.get("name", "Not a valid name")}
        return await _project(request, visitor, db, project_id, "rename", fields, errors, 422)
    assert isinstance(body, ProjectWrite)
    await ProjectService(db, _now(request)).rename(access.project, body.name)
    return _see_other(f"/projects/{project_id}")


@router.post("/projects/{project_id}/delete")
async def delete_project(request: Request, project_id: str) -> Response:
    visitor, db = await _visit(request)
    access = await project_of(db, visitor.principal, project_id, ProjectRole.OWNER)
    fields = await _fields(request)
    if fields.get("confirm", "").strip() != access.project.name:
        errors = {"confirm": "Type the project's name exactly to delete it"}
        return await _project(request, visitor, db, project_id, "delete", fields, errors, 422)
    await ProjectService(db, _now(request)).delete(access.project, get_context(request).storage)
    return _see_other("/projects")


@router.post("/projects/{project_id}/applications")
async def create_application(request: Request, project_id: str) -> Response:
    visitor, db = await _visit(request)
    access = await project_of(db, visitor.principal, project_id, ProjectRole.ADMIN)
    fields = await _fields(request)
    data = {"name": fields.get("name", ""), "platform": fields.get("platform") or "other"}
    if fields.get("bundleId"):
        data["bundleId"] = fields["bundleId"]
    try:
        body = _parse(ApplicationCreate, data)
    except _FormError as exc:
        return await _project(request, visitor, db, project_id, "app", fields, exc.by_field, 422)
    assert isinstance(body, ApplicationCreate)
    view = await ApplicationService(db, _now(request)).create(access.project, body.model_dump())
    return _see_other(f"/projects/{project_id}/apps/{view.application.id}")


@router.post("/projects/{project_id}/members")
async def add_member(request: Request, project_id: str) -> Response:
    visitor, db = await _visit(request)
    access = await project_of(db, visitor.principal, project_id, ProjectRole.ADMIN)
    fields = await _fields(request)
    try:
        body = _parse(MemberCreate, {"email": fields.get("email", ""),
                                     "role": fields.get("role", "tester")})  # fmt: skip
        assert isinstance(body, MemberCreate)
        await ProjectService(db, _now(request)).add_member(access, str(body.email), body.role)
    except _FormError as exc:
        errors = {"email": exc.by_field.get("email") or exc.by_field.get("role") or "Not valid"}
        return await _project(request, visitor, db, project_id, "member", fields, errors, 422)
    except BuildbayError as exc:
        # Refused before anything was written (unknown e-mail, already a member, the owner
        # role): the page is shown again with the reason beside the field.
        if exc.status >= 500:
            raise
        return await _project(request, visitor, db, project_id, "member", fields,
                              {"email": exc.detail}, exc.status)  # fmt: skip
    return _see_other(f"/projects/{project_id}#members")


@router.post("/projects/{project_id}/members/{user_id}/role")
async def change_role(request: Request, project_id: str, user_id: str) -> Response:
    visitor, db = await _visit(request)
    access = await project_of(db, visitor.principal, project_id, ProjectRole.ADMIN)
    fields = await _fields(request)
    try:
        body = _parse(MemberUpdate, {"role": fields.get("role", "")})
    except _FormError:
        errors = {"email": f"Choose one of the roles: {', '.join(ROLES)}"}
        return await _project(request, visitor, db, project_id, "member", {}, errors, 422)
    assert isinstance(body, MemberUpdate)
    await ProjectService(db, _now(request)).change_role(access, user_id, body.role)
    return _see_other(f"/projects/{project_id}#members")


@router.post("/projects/{project_id}/members/{user_id}/remove")
async def remove_member(request: Request, project_id: str, user_id: str) -> Response:
    visitor, db = await _visit(request)
    access = await project_of(db, visitor.principal, project_id, ProjectRole.TESTER)
    await ProjectService(db, _now(request)).remove_member(access, user_id)
    assert visitor.user is not None
    if user_id == visitor.user.id:
        return _see_other("/projects")  # left the project
    return _see_other(f"/projects/{project_id}#members")


# -- an application and its builds --------------------------------------------------------------


def _build_service(request: Request, db: AsyncSession) -> BuildService:
    return BuildService.of(get_context(request), db)


def _links(request: Request, db: AsyncSession) -> InstallLinks:
    return InstallLinks.of(get_context(request), db)


@router.get("/projects/{project_id}/apps/{app_id}")
async def application_page(request: Request, project_id: str, app_id: str) -> Response:
    visitor, db = await _visit(request)
    access = await application_of(db, visitor.principal, project_id, app_id, ProjectRole.TESTER)
    builds, _ = await _build_service(request, db).list(
        access.application, None, 100, None, None, BuildOrder.NEWEST
    )
    links = _links(request, db)
    current = await links.current([b.id for b in builds])
    members = {
        m.user.id: m.user for m in await ProjectService(db, _now(request)).members(access.project)
    }
    fresh = request.query_params.get("link")
    return _page(
        "console/application.html", visitor, project=access.project,
        application=access.application, role=access.role, can=_can(access.role),
        builds=builds, install_urls={k: links.url(v) for k, v in current.items()},
        install_expiry={k: v.expires_at for k, v in current.items()},
        uploaders=members, human_size=human_size, version_label=version_label, fresh_link=fresh,
        max_notes=MAX_NOTES_LENGTH,
    )  # fmt: skip


def _build_path(project_id: str, app_id: str) -> str:
    return f"/projects/{project_id}/apps/{app_id}"


@router.post("/projects/{project_id}/apps/{app_id}/builds/{build_id}/delete")
async def delete_build(request: Request, project_id: str, app_id: str, build_id: str) -> Response:
    visitor, db = await _visit(request)
    access = await application_of(db, visitor.principal, project_id, app_id, ProjectRole.DEVELOPER)
    await _build_service(request, db).delete(access.application, build_id)
    return _see_other(_build_path(project_id, app_id))


@router.get("/projects/{project_id}/apps/{app_id}/builds/{build_id}/download")
async def download_build(request: Request, project_id: str, app_id: str, build_id: str) -> Response:
    visitor, db = await _visit(request)
    access = await application_of(db, visitor.principal, project_id, app_id, ProjectRole.TESTER)
    url = await _build_service(request, db).download_url(access.application, build_id)
    return RedirectResponse(url, status_code=302)


@router.post("/projects/{project_id}/apps/{app_id}/builds/{build_id}/install-link")
async def create_install_link(
    request: Request, project_id: str, app_id: str, build_id: str
) -> Response:
    visitor, db = await _visit(request)
    access = await application_of(db, visitor.principal, project_id, app_id, ProjectRole.TESTER)
    build = await _build_service(request, db).get(access.application, build_id)
    links = _links(request, db)
    current = await links.current([build.id])
    if build.id not in current:
        await links.create(build, visitor.principal.user, DEFAULT_HOURS)
    return _see_other(f"{_build_path(project_id, app_id)}?link={build.id}#build-{build.id}")


# The browser's upload: it asks for the address here, PUTs the file there itself (with a
# progress bar), then asks for verify here. JSON, with the CSRF token in a header.


@router.post("/projects/{project_id}/apps/{app_id}/uploads")
async def start_upload(request: Request, project_id: str, app_id: str) -> Response:
    visitor, db = await _visit(request)
    access = await application_of(db, visitor.principal, project_id, app_id, ProjectRole.DEVELOPER)
    try:
        body = UploadLinkRequest.model_validate(await request.json())
    except (ModelError, ValueError) as exc:
        message = _errors(exc) if isinstance(exc, ModelError) else {"form": "Not JSON"}
        return JSONResponse({"errors": message}, status_code=422)
    try:
        build, target = await _build_service(request, db).create_upload_link(
            access.application, visitor.principal.user, body.file_name, body.file_size, None
        )
    except BuildbayError as exc:
        if exc.status >= 500:
            raise
        return JSONResponse({"errors": {"file": exc.detail}}, status_code=exc.status)
    return JSONResponse(
        {"buildId": build.id, "uploadUrl": target.url, "uploadHeaders": target.headers},
        status_code=201,
    )


@router.post("/projects/{project_id}/apps/{app_id}/uploads/{build_id}/verify")
async def finish_upload(request: Request, project_id: str, app_id: str, build_id: str) -> Response:
    visitor, db = await _visit(request)
    access = await application_of(db, visitor.principal, project_id, app_id, ProjectRole.DEVELOPER)
    try:
        data = await request.json()
        body = VerifyRequest.model_validate(
            {"buildId": build_id, "notes": (data.get("notes") or None) if isinstance(data, dict)
             else None}
        )  # fmt: skip
    except (ModelError, ValueError) as exc:
        message = _errors(exc) if isinstance(exc, ModelError) else {"form": "Not JSON"}
        return JSONResponse({"errors": message}, status_code=422)
    notes = body.notes
    try:
        build = await _build_service(request, db).verify(access.application, build_id, notes)
    except BuildbayError as exc:
        if exc.status >= 500:
            raise
        return JSONResponse({"errors": {"file": exc.detail}}, status_code=exc.status)
    return JSONResponse({"buildId": build.id, "status": build.status.value})


# -- account ------------------------------------------------------------------------------------


@router.get("/account")
async def account_page(request: Request) -> Response:
    visitor, db = await _visit(request)
    return await _account(request, visitor, db)


async def _account(
    request: Request, visitor: Visitor, db: AsyncSession, *, created: Any = None,
    secret: str | None = None, values: dict[str, str] | None = None,
    errors: dict[str, str] | None = None, status_code: int = 200,
) -> Response:  # fmt: skip
    ctx: AppContext = get_context(request)
    user = visitor.principal.user
    usage = await storage_usage(db, user.id)
    tokens = await make_auth_service(ctx, db).list_api_tokens(user)
    settings = ctx.settings
    quota = settings.storage_quota(user.plan)
    rate = settings.requests_per_minute(user.plan) if settings.rate_limit_enabled else None
    return _page(
        "console/account.html", visitor, status_code, user=user, usage=usage, quota=quota,
        max_upload=settings.max_upload_bytes(user.plan), rate=rate, tokens=tokens,
        created=created, secret=secret, values=values or {}, errors=errors or {},
        human_size=human_size, api_url=settings.resolved_public_url,
    )  # fmt: skip


@router.post("/account/tokens")
async def create_token(request: Request) -> Response:
    visitor, db = await _visit(request)
    fields = await _fields(request)
    data: dict[str, Any] = {"name": fields.get("name", "")}
    if fields.get("expiresInDays"):
        days = fields["expiresInDays"]
        number = whole_number(days)
        data["expiresInDays"] = days if number is None else number
    try:
        body = _parse(CreateApiTokenRequest, data)
    except _FormError as exc:
        return await _account(request, visitor, db, values=fields, errors=exc.by_field,
                              status_code=422)  # fmt: skip
    assert isinstance(body, CreateApiTokenRequest)
    token, secret = await make_auth_service(get_context(request), db).create_api_token(
        visitor.principal.user, body.name, body.expires_in_days
    )
    return await _account(request, visitor, db, created=token, secret=secret, status_code=201)


@router.post("/account/tokens/{token_id}/revoke")
async def revoke_token(request: Request, token_id: str) -> Response:
    visitor, db = await _visit(request)
    await make_auth_service(get_context(request), db).delete_api_token(
        visitor.principal.user, token_id
    )
    return _see_other("/account#api-tokens")


def console_sessions(master_key: bytes, refresh_days: int) -> ConsoleSessions:
    return ConsoleSessions(master_key, timedelta(days=refresh_days))

"""Devices over HTTP: the profile service a device enrolls through (pages and plists for Safari
and the device, not the API), a person's own devices (`/api/account/devices`), and a
developer's wish for a mail per enrolled device.

The enrollment addresses (docs/api.md, "Enrolling a device"):
- `GET /devices/register.mobileconfig[?build=<buildId>]`: the profile, for whoever is signed in
  to the console on this browser (else to the sign-in page and back);
- `GET /install/{token}/register-device`: the profile, for the person of a personal install
  link (a shared link cannot enroll: its page says to sign in or ask for a link of one's own);
- `POST /devices/enroll/{token}`: the device's signed answer (the challenge is the token);
- `GET /devices/enrolled/{token}`: the page the device's Safari opens after it.
Whatever they refuse is an HTML page with its status (a device shows nothing of it; Safari
does). They are not in the OpenAPI document, as the console's pages are not.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Path, Request, Response, status
from fastapi.responses import RedirectResponse

from buildbay.auth.dependencies import CurrentUser
from buildbay.auth.enums import TokenScope
from buildbay.builds.dependencies import install_link_reads_within
from buildbay.builds.install_page import limit_install_pages
from buildbay.console.session import ConsoleSessions
from buildbay.deps import Context, ReadsDep, TransactionRoute
from buildbay.devices import schemas
from buildbay.devices.dependencies import DeviceServiceDep, EnrollmentDep
from buildbay.devices.enrollment import ENROLL_PATH, MAX_ANSWER_BYTES, PROFILE_MEDIA_TYPE
from buildbay.devices.service import device_mail_of, own_devices
from buildbay.errors import BadRequest, BuildbayError, Forbidden, PayloadTooLarge
from buildbay.numbers import whole_number
from buildbay.problems import problem_responses
from buildbay.projects.access import ProjectDeveloper, project_access
from buildbay.projects.authorization import ProjectAccess
from buildbay.projects.enums import ProjectRole
from buildbay.templates import NO_STORE, render

log = logging.getLogger("buildbay.devices")

REGISTER_PATH = "/devices/register.mobileconfig"

# -- the API: a person's own devices, a developer's device mails --------------------------------

router = APIRouter(prefix="/api", tags=["devices"], route_class=TransactionRoute)

DeviceId = Annotated[str, Path(alias="id")]
ProjectDeveloperReader = Annotated[
    ProjectAccess,
    Depends(project_access(ProjectRole.DEVELOPER, read_only=True, scope=TokenScope.READ)),
]


@router.get(
    "/account/devices",
    responses=problem_responses(401, 403, 429),
    summary="List your enrolled devices (iPhone, iPad, Mac), oldest first",
)
async def list_devices(principal: CurrentUser, reads: ReadsDep) -> schemas.DeviceList:
    devices = await own_devices(reads, principal.user.id)
    return schemas.DeviceList(devices=[schemas.device_schema(d) for d in devices])


@router.patch(
    "/account/devices/{id}",
    responses=problem_responses(400, 401, 403, 404, 413, 422, 429),
    summary="Rename one of your devices (1..50 characters, Apple's limit)",
)
async def rename_device(
    device_id: DeviceId,
    body: schemas.RenameDeviceRequest,
    principal: CurrentUser,
    service: DeviceServiceDep,
) -> schemas.Device:
    device = await service.rename(principal.user.id, device_id, body.name)
    return schemas.device_schema(device)


@router.delete(
    "/account/devices/{id}",
    status_code=status.HTTP_204_NO_CONTENT,
    responses=problem_responses(401, 403, 404, 429),
    summary="Remove one of your devices (it may enroll again)",
)
async def delete_device(
    device_id: DeviceId, principal: CurrentUser, service: DeviceServiceDep
) -> Response:
    await service.delete(principal.user.id, device_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get(
    "/projects/{id}/members/me/device-mail",
    responses=problem_responses(401, 403, 404, 429),
    summary="Whether you get a mail for each device the project's members enroll (developer+)",
)
async def get_device_mail(access: ProjectDeveloperReader, reads: ReadsDep) -> schemas.DeviceMail:
    return schemas.DeviceMail(device_mail=await device_mail_of(reads, access))


@router.put(
    "/projects/{id}/members/me/device-mail",
    responses=problem_responses(400, 401, 403, 404, 413, 422, 429),
    summary="Ask for (or stop) a mail for each device the project's members enroll (developer+)",
)
async def set_device_mail(
    body: schemas.DeviceMailRequest, access: ProjectDeveloper, service: DeviceServiceDep
) -> schemas.DeviceMail:
    wanted = await service.set_device_mail(access, body.device_mail)
    return schemas.DeviceMail(device_mail=wanted)


# -- the profile service: pages and plists -----------------------------------------------------


class DevicePageRoute(TransactionRoute):
    """Whatever a route of the profile service refuses is an HTML page with its status, for
    the browser (or device) that asked."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def route(request: Request) -> Response:
            try:
                return await handler(request)
            except BuildbayError as exc:
                if exc.status >= 500:
                    raise
                return _refusal_page(exc)

        return route


# What each refusal's page says next: (title, what to do).
_AGAIN = "Open the registration page on this device again to download a new profile."
_PAGES = {
    "personal_link_required": (
        "Sign in to register this device",
        "Sign in on this device and register it from there, or ask the developers for an "
        "install link of your own (the one in a mail sent to you).",
    ),
    "not_your_install_link": (
        "This install link is someone else's",
        "Register the device from your own account or your own install link.",
    ),
    "answer_too_large": ("This answer is too large", _AGAIN),
    "device_enrolled_elsewhere": ("This device is someone else's", ""),
    "enrolled_page_expired": ("This page has expired", ""),
    "device_gone": ("This device was removed", ""),
}
_TITLES = {
    400: "This device could not be registered",
    404: "Registration link not found",
    410: "Registration link no longer works",
    429: "Too many requests right now",
}


def _refusal_page(exc: BuildbayError) -> Response:
    title, hint = _PAGES.get(exc.code, (_TITLES.get(exc.status, "Not possible"), _AGAIN))
    headers = {**NO_STORE, **exc.headers}
    if exc.status == status.HTTP_429_TOO_MANY_REQUESTS:
        hint = f"Try again in {exc.headers.get('Retry-After', '60')} seconds."
    sign_in_url = None
    if exc.code == "personal_link_required":
        target = _register_path(exc.extensions.get("buildId"))
        sign_in_url = f"/login?{urlencode({'next': target})}"
    return render(
        "install_error.html", exc.status, headers=headers, title=title, detail=exc.detail,
        hint=hint, sign_in_url=sign_in_url,
    )  # fmt: skip


def _register_path(build_id: str | None) -> str:
    return f"{REGISTER_PATH}?{urlencode({'build': build_id})}" if build_id else REGISTER_PATH


pages = APIRouter(
    tags=["devices"],
    route_class=DevicePageRoute,
    include_in_schema=False,
    dependencies=[Depends(limit_install_pages)],
)

Token = Annotated[str, Path()]


def _profile(ctx: Context, data: bytes) -> Response:
    if not ctx.settings.resolved_public_url.startswith("https://"):
        log.warning(
            "device registration profile handed out with the public URL %s, which is not "
            "https://: iOS sends its answer only to an https:// address (set BUILDBAY_PUBLIC_URL "
            "to the https:// address of a TLS proxy; docs/operations.md)",
            ctx.settings.resolved_public_url,
        )
    disposition = 'attachment; filename="register-device.mobileconfig"'
    return Response(
        data,
        media_type=PROFILE_MEDIA_TYPE,
        headers={**NO_STORE, "Content-Disposition": disposition},
    )


@pages.get(REGISTER_PATH)
async def register_device(
    request: Request, enrollment: EnrollmentDep, ctx: Context, build: str | None = None
) -> Response:
    """The profile for whoever is signed in to the console here; else the sign-in page, which
    comes back here."""
    console: ConsoleSessions = request.app.state.console
    user_id = await console.signed_in(request, enrollment.reads, enrollment.now)
    if user_id is None:
        target = _register_path(build)
        return RedirectResponse(f"/login?{urlencode({'next': target})}", status_code=303)
    return _profile(ctx, await enrollment.profile(user_id, build))


@pages.get("/install/{token}/register-device")
async def register_device_through_link(
    token: Token, request: Request, enrollment: EnrollmentDep, ctx: Context
) -> Response:
    """The profile for the person of a personal install link (as every use of the link, refused
    to someone else signed in here); a shared link's holder may be anyone: refused (403)."""
    links = install_link_reads_within(ctx, enrollment.db)
    console: ConsoleSessions = request.app.state.console
    target = await links.open(token, lambda: console.signed_in(request, links.reads, links.now))
    if target.link.owner_id is None:
        raise Forbidden(
            "This install link is shared: whoever holds it may open it, so a device "
            "registered through it could be anyone's.",
            code="personal_link_required",
            extensions={"buildId": target.build.id},
        )
    return _profile(ctx, await enrollment.profile(target.link.owner_id, target.build.id))


@pages.post(ENROLL_PATH + "/{token}")
async def enroll_device(token: Token, request: Request, enrollment: EnrollmentDep) -> Response:
    """A device's signed answer to a profile: recorded, then 301 to the page that says so.
    A body larger than MAX_ANSWER_BYTES is refused before it is read (by its Content-Length, or
    as soon as more arrives), and so is the answer to a challenge that is not live."""
    _refuse_large(request)
    challenge = await enrollment.challenge(token)
    body = await _read_answer(request)
    page = await enrollment.answer(token, challenge, body)
    return RedirectResponse(page, status_code=status.HTTP_301_MOVED_PERMANENTLY, headers=NO_STORE)


@pages.get("/devices/enrolled/{token}")
async def device_enrolled(token: Token, enrollment: EnrollmentDep) -> Response:
    page = await enrollment.enrolled_page(token)
    return render(
        "device_enrolled.html", headers=NO_STORE, device=page.device, back_url=page.back_url
    )


def _too_large() -> PayloadTooLarge:
    return PayloadTooLarge(
        f"A device's answer is at most {MAX_ANSWER_BYTES // 1024} KiB", code="answer_too_large"
    )


def _refuse_large(request: Request) -> None:
    declared = request.headers.get("content-length")
    if declared is None:
        return
    length = whole_number(declared, max_digits=20)
    if length is None:
        raise BadRequest("Content-Length is not a number")
    if length > MAX_ANSWER_BYTES:
        raise _too_large()


async def _read_answer(request: Request) -> bytes:
    """The body, read as it arrives and given up as soon as it passes MAX_ANSWER_BYTES."""
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_ANSWER_BYTES:
            raise _too_large()
    return bytes(body)

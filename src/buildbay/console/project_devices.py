"""The console: a project's devices, for its developers (issue 37): every device its members
enrolled, searched and paged, each against the newest ad-hoc or development build of each iOS
application; the files for Apple's device upload and for a spreadsheet; the developer's own wish
for a mail per enrolled device; and the project's App Store Connect API key (admins put and
remove it; it is never shown) to register devices with Apple, one or all those missing, each
outcome in words. The same reads and services as `/api/projects/{id}/devices` and the Apple
routes (devices/reads.py, devices/export.py, devices/service.py, devices/apple/)."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlencode

from fastapi import APIRouter, Request, Response
from fastapi.responses import StreamingResponse
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.console.pages import (
    ConsoleRoute,
    FormError,
    can,
    domain_field_errors,
    form_fields,
    page,
    parse_form,
    said,
    search_and_cursor,
    see_other,
    sentence,
    visit,
)
from buildbay.console.session import Visitor
from buildbay.db.reads import Reads
from buildbay.deps import get_context
from buildbay.devices.apple.dependencies import apple_key_service, apple_registration_service
from buildbay.devices.apple.enums import Outcome
from buildbay.devices.apple.keys import AppleKeyRecord, apple_key_of
from buildbay.devices.apple.registrations import Batch, Registration, registrations_by_device
from buildbay.devices.apple.schemas import AppleKeyPut
from buildbay.devices.dependencies import device_service
from buildbay.devices.export import DeviceFileFormat, device_file, download_headers
from buildbay.devices.reads import MAX_SEARCH, project_devices
from buildbay.devices.service import device_mail_of
from buildbay.errors import BuildbayError, NotFound, ValidationFailed
from buildbay.projects.authorization import project_of
from buildbay.projects.enums import ProjectRole
from buildbay.words import counted

router = APIRouter(route_class=ConsoleRoute, include_in_schema=False)

DEVICES_PER_PAGE = 50


def devices_path(project_id: str) -> str:
    return f"/projects/{project_id}/devices"


@dataclass(frozen=True, slots=True)
class Shown:
    """Which devices the page lists: `?q=` (in a device's name, model or UDID, or its tester's
    name or e-mail) and `?cursor=` (the next page's, as the API's)."""

    search: str
    after_id: str | None

    def query(self, cursor: str | None) -> str:
        wanted = {"q": self.search, "cursor": cursor or ""}
        return urlencode({k: v for k, v in wanted.items() if v})


def _shown(request: Request) -> Shown:
    search, after_id = search_and_cursor(
        request, MAX_SEARCH, pages_of="devices", start="the project's devices page"
    )
    return Shown(search, after_id)


@router.get("/projects/{project_id}/devices")
async def devices_page(request: Request, project_id: str) -> Response:
    visitor, db = await visit(request)
    return await _render(request, visitor, db, project_id)


async def _render(
    request: Request, visitor: Visitor, db: AsyncSession, project_id: str, *,
    values: dict[str, str] | None = None, errors: dict[str, str] | None = None,
    status_code: int = 200,
) -> Response:  # fmt: skip
    """The page; after a refused key form, its fields show `values` (never the private key)
    and `errors`."""
    reads = Reads.within(db)
    access = await project_of(reads, visitor.principal, project_id, ProjectRole.DEVELOPER)
    shown = _shown(request)
    found = await project_devices(
        reads, access.project.id, DEVICES_PER_PAGE, shown.after_id, shown.search or None
    )
    device_ids = [listed.device.id for listed in found.devices]
    return page(
        "console/project_devices.html", visitor, status_code, project=access.project,
        role=access.role, can=can(access.role), found=found, shown=shown,
        next_page=shown.query(found.next_cursor) if found.next_cursor else None,
        first_page=shown.query(None) if shown.after_id else None,
        device_mail=await device_mail_of(reads, access),
        apple_key=await key_if_any(reads, access.project.id),
        registered=await registrations_by_device(reads, access.project.id, device_ids),
        values=values or {}, errors=errors or {},
    )  # fmt: skip


async def key_if_any(reads: Reads, project_id: str) -> AppleKeyRecord | None:
    """The project's App Store Connect key (which one: never its private key), or None."""
    try:
        return await apple_key_of(reads, project_id)
    except NotFound:
        return None


@router.get("/projects/{project_id}/devices/export")
async def export_devices(request: Request, project_id: str) -> Response:
    """The file, as the API's export streams it (a batch of devices at a time)."""
    visitor, db = await visit(request)
    reads = Reads.within(db)
    access = await project_of(reads, visitor.principal, project_id, ProjectRole.DEVELOPER)
    wanted = request.query_params.get("format", DeviceFileFormat.APPLE.value)
    if wanted not in {f.value for f in DeviceFileFormat}:
        raise ValidationFailed("Choose the file for Apple's device upload, or the CSV file.")
    kind = DeviceFileFormat(wanted)
    project = access.project
    chunks = await device_file(reads, get_context(request).read_engine, project.id, kind)
    headers = download_headers(project.name, project.id, kind)
    return StreamingResponse(chunks, media_type=kind.media_type, headers=headers)


@router.post("/projects/{project_id}/devices/mail")
async def set_device_mail(request: Request, project_id: str) -> Response:
    visitor, db = await visit(request)
    access = await project_of(
        Reads.within(db), visitor.principal, project_id, ProjectRole.DEVELOPER
    )
    wanted = (await form_fields(request)).get("deviceMail") == "on"
    await device_service(get_context(request), db).set_device_mail(access, wanted)
    visitor.tell(
        "You will get a mail for each device a member of this project registers."
        if wanted
        else "You will get no mail when members register devices."
    )
    return see_other(devices_path(project_id) + "#device-mail")


# -- Apple: the project's App Store Connect key, and registering devices with it ----------------

APPLE = "#apple"


@router.post("/projects/{project_id}/devices/apple-key")
async def put_apple_key(request: Request, project_id: str) -> Response:
    """Admins only: the key is a secret of the project's. Never shown again, not even to the
    admin who put it, nor put back in the form when it is refused."""
    visitor, db = await visit(request)
    access = await project_of(Reads.within(db), visitor.principal, project_id, ProjectRole.ADMIN)
    fields = await form_fields(request)
    shown = {k: fields.get(k, "").strip() for k in ("keyId", "issuerId")}
    try:
        body = parse_form(AppleKeyPut, {**shown, "privateKey": fields.get("privateKey", "")})
        assert isinstance(body, AppleKeyPut)
        user = access.caller.user
        async with db.begin_nested():
            key = await apple_key_service(get_context(request), db).put(
                access.project.id, body.key_id, body.issuer_id, body.private_key,
                (user.id, user.email),
            )  # fmt: skip
    except FormError as exc:
        return await _render(request, visitor, db, project_id, values=shown,
                             errors=exc.by_field, status_code=422)  # fmt: skip
    except ValidationFailed as exc:
        return await _render(request, visitor, db, project_id, values=shown,
                             errors=domain_field_errors(exc, "privateKey"),
                             status_code=exc.status)  # fmt: skip
    visitor.tell(f"Key {key.key_id} saved. Devices can be registered with Apple from this page.")
    return see_other(devices_path(project_id) + APPLE)


@router.post("/projects/{project_id}/devices/apple-key/delete")
async def delete_apple_key(request: Request, project_id: str) -> Response:
    visitor, db = await visit(request)
    access = await project_of(Reads.within(db), visitor.principal, project_id, ProjectRole.ADMIN)
    await apple_key_service(get_context(request), db).delete(access.project.id)
    visitor.tell(
        "The App Store Connect key is removed. Apple keeps the devices registered with it."
    )
    return see_other(devices_path(project_id) + APPLE)


@router.post("/projects/{project_id}/devices/{device_id}/apple")
async def register_with_apple(request: Request, project_id: str, device_id: str) -> Response:
    visitor, db = await visit(request)
    access = await project_of(
        Reads.within(db), visitor.principal, project_id, ProjectRole.DEVELOPER
    )
    service = apple_registration_service(get_context(request), db)
    try:
        registration = await service.register_device(
            access.project.id, device_id, access.caller.user.id
        )
    except BuildbayError as exc:  # Apple's answer, or no key: said, and what stands stands
        visitor.tell(f"Not registered with Apple: {sentence(said(exc))}")
        return see_other(devices_path(project_id) + f"#device-{device_id}")
    visitor.tell(_outcome(registration))
    return see_other(devices_path(project_id) + f"#device-{device_id}")


@router.post("/projects/{project_id}/devices/apple")
async def register_missing_with_apple(request: Request, project_id: str) -> Response:
    visitor, db = await visit(request)
    access = await project_of(
        Reads.within(db), visitor.principal, project_id, ProjectRole.DEVELOPER
    )
    service = apple_registration_service(get_context(request), db)
    try:
        batch = await service.register_missing(access.project.id, access.caller.user.id)
    except BuildbayError as exc:
        # Apple stopped the batch (the key refused, the yearly limit, Apple away): the devices
        # it registered before stand (the unit of work commits them), and the sentence says so.
        registered = exc.extensions.get("registered") or []
        if registered:
            done = counted(len(registered), "device")
            visitor.tell(f"Registering with Apple stopped after {done}: {sentence(said(exc))}")
        else:
            visitor.tell(f"Not registered with Apple: {sentence(said(exc))}")
        return see_other(devices_path(project_id) + APPLE)
    visitor.tell(_batch(batch))
    return see_other(devices_path(project_id) + APPLE)


def _outcome(registration: Registration) -> str:
    name = registration.entry.name
    if registration.outcome is Outcome.CREATED:
        return f"{name} is registered with Apple."
    if registration.outcome is Outcome.EXISTING:
        return f"Apple already had {name}: it is marked registered."
    return f"{name} was registered with Apple before: nothing sent."


def _batch(batch: Batch) -> str:
    """What "Register all missing" did, in words."""
    if not batch.registrations and not batch.refused:
        return "Every device is registered with Apple already: nothing sent."
    existing = sum(r.outcome is Outcome.EXISTING for r in batch.registrations)
    parts = [f"{counted(len(batch.registrations), 'device')} registered with Apple"
             + (f" ({existing} Apple had already)" if existing else "") + "."]  # fmt: skip
    for refused in batch.refused:
        parts.append(f"Apple refused {refused.entry.name}: {sentence(refused.detail)}")
    if batch.remaining:
        parts.append(f"{counted(batch.remaining, 'device')} still to send: press the button again.")
    return " ".join(parts)

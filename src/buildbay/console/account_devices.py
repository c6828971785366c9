"""The console: the visitor's own devices (issue 37): the iPhones, iPads and Macs they enrolled,
to rename and remove, and "Register this device" on an iPhone or iPad. The same services as
`/api/account/devices` (devices/service.py)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.console.pages import (
    ConsoleRoute,
    FormError,
    form_fields,
    page,
    parse_form,
    see_other,
    visit,
)
from buildbay.console.session import Visitor
from buildbay.db.reads import Reads
from buildbay.deps import get_context
from buildbay.devices.dependencies import device_service
from buildbay.devices.links import register_device_path
from buildbay.devices.schemas import DEVICE_NAME_MAX, RenameDeviceRequest
from buildbay.devices.service import own_devices

router = APIRouter(route_class=ConsoleRoute, include_in_schema=False)

DEVICES_PAGE = "/account/devices"


@router.get(DEVICES_PAGE)
async def devices_page(request: Request) -> Response:
    visitor, db = await visit(request)
    return await _devices(visitor, db)


async def _devices(
    visitor: Visitor, db: AsyncSession, *, renamed: str | None = None,
    values: dict[str, str] | None = None, errors: dict[str, str] | None = None,
    status_code: int = 200,
) -> Response:  # fmt: skip
    """The page; after a refused rename, `renamed` names the device, whose field shows `values`
    and `errors`."""
    devices = await own_devices(Reads.within(db), visitor.principal.user.id)
    return page(
        "console/account_devices.html", visitor, status_code, devices=devices,
        register_url=register_device_path(), renamed=renamed, values=values or {},
        errors=errors or {}, max_name=DEVICE_NAME_MAX,
    )  # fmt: skip


@router.post(DEVICES_PAGE + "/{device_id}/name")
async def rename_device(request: Request, device_id: str) -> Response:
    visitor, db = await visit(request)
    fields = await form_fields(request)
    try:
        body = parse_form(RenameDeviceRequest, {"name": fields.get("name", "")})
    except FormError as exc:
        return await _devices(visitor, db, renamed=device_id, values=fields,
                              errors=exc.by_field, status_code=422)  # fmt: skip
    assert isinstance(body, RenameDeviceRequest)
    service = device_service(get_context(request), db)
    device = await service.rename(visitor.principal.user.id, device_id, body.name)
    visitor.tell(f"Renamed to “{device.name}”.")
    return see_other(f"{DEVICES_PAGE}#device-{device.id}")


@router.post(DEVICES_PAGE + "/{device_id}/delete")
async def remove_device(request: Request, device_id: str) -> Response:
    visitor, db = await visit(request)
    service = device_service(get_context(request), db)
    await service.delete(visitor.principal.user.id, device_id)
    visitor.tell(
        "Device removed. Developers no longer see it; register it again from the device if you "
        "need it back."
    )
    return see_other(DEVICES_PAGE)

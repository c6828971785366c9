"""How the devices' services are made from the app's context (one factory each), and the same as
route dependencies. The console calls the factories."""

from __future__ import annotations

from typing import Annotated

from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.context import AppContext
from buildbay.deps import in_unit_of_work
from buildbay.devices.enrollment import EnrolledLinks, Enrollment
from buildbay.devices.service import DeviceService


def device_service(ctx: AppContext, db: AsyncSession) -> DeviceService:
    return DeviceService(db, ctx.clock.now(), ctx.mail, ctx.settings.resolved_public_url)


def enrolled_links(ctx: AppContext) -> EnrolledLinks:
    return EnrolledLinks(ctx.settings.signing_key, ctx.settings.resolved_public_url)


def enrollment(ctx: AppContext, db: AsyncSession) -> Enrollment:
    settings = ctx.settings
    return Enrollment(
        db,
        ctx.clock.now(),
        settings.resolved_public_url,
        settings.profile_signer,
        device_service(ctx, db),
        enrolled_links(ctx),
        ctx.install_tokens,
    )


DeviceServiceDep = Annotated[DeviceService, in_unit_of_work(device_service)]
EnrollmentDep = Annotated[Enrollment, in_unit_of_work(enrollment)]

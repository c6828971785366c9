"""How the applications service is made from the app's context (`application_service`), and the same
as a route dependency on the request's unit of work (`Service`). The routes take `Service`; the
console and anything else that needs the service call `application_service`."""

from __future__ import annotations

from typing import Annotated

from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.applications.service import ApplicationService
from buildbay.context import AppContext
from buildbay.deps import in_unit_of_work


def application_service(ctx: AppContext, db: AsyncSession) -> ApplicationService:
    return ApplicationService(db, ctx.clock.now())


Service = Annotated[ApplicationService, in_unit_of_work(application_service)]

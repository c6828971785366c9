"""How the projects service is made from the app's context (`project_service`), and the same
as a route dependency on the request's unit of work (`Service`). The routes take `Service`; the
console and anything else that needs the service call `project_service`."""

from __future__ import annotations

from typing import Annotated

from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.context import AppContext
from buildbay.deps import in_unit_of_work
from buildbay.projects.service import ProjectService


def project_service(ctx: AppContext, db: AsyncSession) -> ProjectService:
    return ProjectService(db, ctx.clock.now(), ctx.settings.invitations_per_day)


Service = Annotated[ProjectService, in_unit_of_work(project_service)]

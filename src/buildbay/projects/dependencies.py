"""How the projects service is made from the app's context, one factory each named for what it
makes, and as a route dependency on the request's unit of work. Routes, the console and
anything else that needs one call these."""

from __future__ import annotations

from typing import Annotated

from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.context import AppContext
from buildbay.deps import in_unit_of_work
from buildbay.projects.service import ProjectService


def project_service(ctx: AppContext, db: AsyncSession) -> ProjectService:
    return ProjectService(db, ctx.clock.now(), ctx.settings.invitations_per_day)


Service = Annotated[ProjectService, in_unit_of_work(project_service)]

"""How the invitations service is made from the app's context (`invitation_service`), and the same
as a route dependency on the request's unit of work (`Service`). The routes take `Service`; the
console and anything else that needs the service call `invitation_service`."""

from __future__ import annotations

from typing import Annotated

from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.context import AppContext
from buildbay.deps import in_unit_of_work
from buildbay.invitations.service import InvitationService


def invitation_service(ctx: AppContext, db: AsyncSession) -> InvitationService:
    settings = ctx.settings
    return InvitationService(db, ctx.clock.now(), ctx.mail, settings.resolved_public_url,
                             settings.invitations_per_day, ctx.unsubscribe)  # fmt: skip


Service = Annotated[InvitationService, in_unit_of_work(invitation_service)]

"""How the channels service is made from the app's context (`channel_service`), and the same
as a route dependency on the request's unit of work (`Service`). The routes take `Service`; the
console and anything else that needs the service call `channel_service`."""

from __future__ import annotations

from typing import Annotated

from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.channels.service import ChannelService
from buildbay.context import AppContext
from buildbay.deps import in_unit_of_work


def channel_service(ctx: AppContext, db: AsyncSession) -> ChannelService:
    return ChannelService(db, ctx.clock.now())


Service = Annotated[ChannelService, in_unit_of_work(channel_service)]

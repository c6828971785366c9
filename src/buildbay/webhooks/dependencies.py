"""How the webhooks service is made from the app's context (`webhook_service`), and the same
as a route dependency on the request's unit of work (`Service`). The routes take `Service`; the
console and anything else that needs the service call `webhook_service`."""

from __future__ import annotations

from typing import Annotated

from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.context import AppContext
from buildbay.deps import in_unit_of_work
from buildbay.webhooks.service import WebhookService


def webhook_service(ctx: AppContext, db: AsyncSession) -> WebhookService:
    return WebhookService(db, ctx.clock.now(), ctx.settings)


Service = Annotated[WebhookService, in_unit_of_work(webhook_service)]

"""How the trusted publishers' service is made from the app's context (`publisher_service`),
and the same as a route dependency on the request's unit of work (`Service`)."""

from __future__ import annotations

from typing import Annotated

from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.config import Environment
from buildbay.context import AppContext
from buildbay.deps import in_unit_of_work
from buildbay.publishers.service import TrustedPublishers


def publisher_service(ctx: AppContext, db: AsyncSession) -> TrustedPublishers:
    assert ctx.publisher_keys is not None  # create_app makes them
    development = ctx.settings.env is Environment.DEVELOPMENT
    return TrustedPublishers(db, ctx.clock.now(), ctx.publisher_keys, development=development)


Service = Annotated[TrustedPublishers, in_unit_of_work(publisher_service)]

"""How the distribution services are made from the app's context (`group_service`,
`distributor`), and the groups service as a route dependency on the request's unit of work
(`Service`). The routes take `Service` or call a factory; so does the console."""

from __future__ import annotations

from typing import Annotated

from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.context import AppContext
from buildbay.deps import in_unit_of_work
from buildbay.distribution.groups import GroupService
from buildbay.distribution.join_links import JoinLinks
from buildbay.distribution.service import Distributor
from buildbay.invitations.dependencies import invitation_service


def group_service(ctx: AppContext, db: AsyncSession) -> GroupService:
    return GroupService(db, ctx.clock.now(), invitation_service(ctx, db))


def distributor(ctx: AppContext, db: AsyncSession) -> Distributor:
    public_url = ctx.settings.resolved_public_url
    return Distributor(db, ctx.clock.now(), public_url, invitation_service(ctx, db))


Service = Annotated[GroupService, in_unit_of_work(group_service)]


def join_links(ctx: AppContext, db: AsyncSession) -> JoinLinks:
    settings = ctx.settings
    return JoinLinks(db, ctx.clock.now(), ctx.mail, settings.resolved_public_url,
                     settings.invitations_per_day, ctx.unsubscribe, settings.signup)  # fmt: skip


JoinLinksDep = Annotated[JoinLinks, in_unit_of_work(join_links)]

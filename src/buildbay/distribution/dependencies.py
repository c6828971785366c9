"""How the distribution services are made from the app's context (`group_service`,
`distributor`), and the groups service as a route dependency on the request's unit of work
(`Service`). The routes take `Service` or call a factory; so does the console."""

from __future__ import annotations

from typing import Annotated

from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.context import AppContext
from buildbay.deps import in_unit_of_work
from buildbay.distribution.groups import GroupService
from buildbay.distribution.join_links import JoinLinks, MailBudget
from buildbay.distribution.service import Distributor
from buildbay.invitations.dependencies import invitation_service
from buildbay.sso.policy import password_policy


def group_service(ctx: AppContext, db: AsyncSession) -> GroupService:
    return GroupService(db, ctx.clock.now(), invitation_service(ctx, db))


def distributor(ctx: AppContext, db: AsyncSession) -> Distributor:
    public_url = ctx.settings.resolved_public_url
    return Distributor(db, ctx.clock.now(), public_url, invitation_service(ctx, db))


Service = Annotated[GroupService, in_unit_of_work(group_service)]


def join_links(ctx: AppContext, db: AsyncSession) -> JoinLinks:
    settings = ctx.settings
    budget = MailBudget(
        per_link=settings.join_link_mails_per_day or None,
        per_address=settings.join_link_mails_per_address_per_day,
    )
    return JoinLinks(db, ctx.clock.now(), ctx.mail, settings.resolved_public_url, budget,
                     ctx.unsubscribe, settings.signup, password_policy(settings))  # fmt: skip


JoinLinksDep = Annotated[JoinLinks, in_unit_of_work(join_links)]

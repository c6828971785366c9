"""How the team's feedback services are made from the app's context (`triage_service`,
`feedback_reads`), and the same as route dependencies: on the request's unit of work for the
routes that change something, on its read-only reads for those that only read. The console
calls the factories."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.context import AppContext
from buildbay.db.reads import Reads
from buildbay.deps import in_unit_of_work, on_reads
from buildbay.feedback.reads import FeedbackReads
from buildbay.feedback.triage import TriageService


def _url_ttl(ctx: AppContext) -> timedelta:
    # A screenshot's address lives as long as a build's download address.
    return timedelta(seconds=ctx.settings.download_link_ttl_seconds)


def triage_service(ctx: AppContext, db: AsyncSession) -> TriageService:
    return TriageService(
        db, ctx.clock.now(), ctx.mail, ctx.storage, ctx.settings.resolved_public_url, _url_ttl(ctx)
    )


def feedback_reads(ctx: AppContext, reads: Reads) -> FeedbackReads:
    return FeedbackReads(reads, ctx.clock.now(), ctx.storage, _url_ttl(ctx))


Triage = Annotated[TriageService, in_unit_of_work(triage_service)]
TeamReads = Annotated[FeedbackReads, on_reads(feedback_reads)]

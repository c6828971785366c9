"""How the builds services are made from the app's context (one factory each, named for what it
makes), and the same as route dependencies: on the request's unit of work for routes that change
something, on its read-only reads for routes that only read. The console and the job handlers
(app.py `job_handlers`) call the factories."""

from __future__ import annotations

from typing import Annotated

from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.builds.install import InstallLinkReads, InstallLinks
from buildbay.builds.reads import BuildReads
from buildbay.builds.service import BuildService
from buildbay.context import AppContext
from buildbay.db.reads import Reads
from buildbay.deps import in_unit_of_work, on_reads


def build_service(ctx: AppContext, db: AsyncSession) -> BuildService:
    return BuildService(db, ctx.clock.now(), ctx.settings, ctx.storage, ctx.readers)


def build_reads(ctx: AppContext, reads: Reads) -> BuildReads:
    return BuildReads(reads, ctx.clock.now(), ctx.settings, ctx.storage)


def install_link_reads(ctx: AppContext, reads: Reads) -> InstallLinkReads:
    return InstallLinkReads(
        reads, ctx.clock.now(), ctx.install_tokens, ctx.settings.resolved_public_url
    )


def install_link_reads_within(ctx: AppContext, db: AsyncSession) -> InstallLinkReads:
    """An install link's reads inside the unit of work that records its opens and downloads:
    one connection for the request, never a read connection held beside it."""
    return install_link_reads(ctx, Reads.within(db))


def install_links(ctx: AppContext, db: AsyncSession) -> InstallLinks:
    return InstallLinks(db, install_link_reads_within(ctx, db))


# Writes: the request's unit of work.
Service = Annotated[BuildService, in_unit_of_work(build_service)]
Links = Annotated[InstallLinks, in_unit_of_work(install_links)]
# Reads: its read-only reads.
Builds = Annotated[BuildReads, on_reads(build_reads)]
LinkReads = Annotated[InstallLinkReads, on_reads(install_link_reads)]
# An install link's routes that record what they serve read in their unit of work.
RecordingLinkReads = Annotated[InstallLinkReads, in_unit_of_work(install_link_reads_within)]

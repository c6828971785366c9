"""The builds services as route dependencies: on the request's unit of work for routes that
change something, on its read-only reads for routes that only read."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends

from buildbay.builds.install import InstallLinkReads, InstallLinks
from buildbay.builds.reads import BuildReads
from buildbay.builds.service import BuildService
from buildbay.deps import Context, ReadsDep, SessionDep


async def build_service(ctx: Context, db: SessionDep) -> BuildService:
    return BuildService.of(ctx, db)


async def build_reads(ctx: Context, reads: ReadsDep) -> BuildReads:
    return BuildReads.of(ctx, reads)


async def install_links(ctx: Context, db: SessionDep) -> InstallLinks:
    return InstallLinks.of(ctx, db)


async def install_link_reads(ctx: Context, reads: ReadsDep) -> InstallLinkReads:
    return InstallLinkReads.of(ctx, reads)


# Writes: the request's unit of work.
Service = Annotated[BuildService, Depends(build_service)]
Links = Annotated[InstallLinks, Depends(install_links)]
# Reads: its read-only reads.
Builds = Annotated[BuildReads, Depends(build_reads)]
LinkReads = Annotated[InstallLinkReads, Depends(install_link_reads)]

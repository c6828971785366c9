"""The builds services as route dependencies: on the request's unit of work for routes that
change something, on its read-only reads for routes that only read."""

from __future__ import annotations

from typing import Annotated

from buildbay.builds.install import InstallLinkReads, InstallLinks
from buildbay.builds.reads import BuildReads
from buildbay.builds.service import BuildService
from buildbay.deps import in_unit_of_work, on_reads

# Writes: the request's unit of work.
Service = Annotated[BuildService, in_unit_of_work(BuildService.of)]
Links = Annotated[InstallLinks, in_unit_of_work(InstallLinks.of)]
# Reads: its read-only reads.
Builds = Annotated[BuildReads, on_reads(BuildReads.of)]
LinkReads = Annotated[InstallLinkReads, on_reads(InstallLinkReads.of)]

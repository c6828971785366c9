"""The build page's devices (issue 37): for an ad-hoc or development .ipa, how many testers can't
install it (those none of whose enrolled devices its profile lists) and the devices it misses,
the most recently enrolled first, up to SHOWN_MISSING of them (the project's devices page has
them all); for an enterprise or App Store profile, that any device can install it; for a build
verified before profiles' devices were kept, that they are not known. The same reach as the
API's `.../builds/{id}/devices` (devices/reach.py): two statements whatever the project's size."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from buildbay.builds.records import BuildRecord
from buildbay.db.reads import Reads
from buildbay.devices.reach import profile_scope, reach_counts, reach_page
from buildbay.devices.records import ProfileScope, ReachCounts, ReachedDevice

SHOWN_MISSING = 100


@dataclass(frozen=True, slots=True)
class BuildDevices:
    scope: ProfileScope
    profile_kind: str | None  # ad-hoc, development, enterprise, app-store; None: no profile read
    counts: ReachCounts | None = None  # a LISTED profile's
    missing: list[ReachedDevice] = field(default_factory=list)  # the first SHOWN_MISSING

    @property
    def more_missing(self) -> int:
        """The missed devices the page does not list."""
        return self.counts.missing - len(self.missing) if self.counts else 0


def _kind(metadata: dict[str, Any] | None) -> str | None:
    provisioning = (metadata or {}).get("provisioning")
    kind = provisioning.get("type") if isinstance(provisioning, dict) else None
    return kind if isinstance(kind, str) else None


async def build_devices(reads: Reads, build: BuildRecord) -> BuildDevices | None:
    """None for a build that is not an .ipa."""
    scope = profile_scope(build.file_name, build.metadata_)
    if scope is None:
        return None
    kind = _kind(build.metadata_)
    if scope is not ProfileScope.LISTED:
        return BuildDevices(scope, kind)
    counts = await reach_counts(reads, build.project_id, build.id)
    if counts is None:  # verified before profiles' UDIDs were kept
        return BuildDevices(ProfileScope.UNKNOWN, kind)
    missing: list[ReachedDevice] = []
    if counts.missing:
        missing, _ = await reach_page(
            reads, build.project_id, build.id, SHOWN_MISSING, None, only=False
        )
    return BuildDevices(scope, kind, counts, missing)

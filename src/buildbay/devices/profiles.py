"""Which devices a build's profile lists, as far as this server knows it, before asking whose
devices those are: a build verified before profiles' UDIDs were kept (build_profile_devices,
issue 37) has an ad-hoc or development profile whose devices are not known, and must not read as
one that lists none of them (the same rule as devices/reach.py's build_reach)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import bindparam, select

from buildbay.db.reads import Reads
from buildbay.devices.models import BuildProfileDevice
from buildbay.devices.reach import profile_scope
from buildbay.devices.records import ProfileScope

_ANY_STORED = (
    select(BuildProfileDevice.udid)
    .where(BuildProfileDevice.build_id == bindparam("build_id"))
    .limit(1)
)


async def known_scope(
    reads: Reads, build_id: str, file_name: str, metadata: dict[str, Any] | None
) -> ProfileScope | None:
    """The build's profile scope (devices/reach.py profile_scope), UNKNOWN for a profile that
    lists devices none of which were stored. None: not an .ipa."""
    scope = profile_scope(file_name, metadata)
    if scope is not ProfileScope.LISTED:
        return scope
    stored = await reads.scalar(_ANY_STORED, {"build_id": build_id})
    return scope if stored is not None else ProfileScope.UNKNOWN

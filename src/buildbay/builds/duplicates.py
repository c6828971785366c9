"""One build per binary (issue 36).

- **A duplicate** is a build whose bytes have the SHA-256 of a ready build of the same
  application. Where upload-link is told the file's `sha256`, it answers before any byte is sent:
  409 `duplicate_build` naming the ready build, or that build itself when asked to reuse it.
  Otherwise verify finds it, answers the same 409 and deletes the new copy.
- **The same version code with other bytes** as a ready build of the same application is a
  warning (`version_exists`, shown with the build: extras.py), or refused with 409
  `version_exists` under the application's `unique` version policy.

Verify decides both under the application's row lock (BuildService.mark_ready), so that of two
builds verified at the same moment the second sees the first: the same bytes sent twice at once
end as one ready build.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import bindparam, select

from buildbay.builds.enums import BuildStatus
from buildbay.builds.models import Build
from buildbay.builds.reads import BUILD
from buildbay.builds.records import BuildRecord
from buildbay.builds.schemas import version_label
from buildbay.db.reads import Reads
from buildbay.errors import Conflict
from buildbay.numbers import whole_number

_OTHER_READY = (
    Build.application_id == bindparam("application_id"),
    Build.status == BuildStatus.READY,
    Build.id != bindparam("build_id"),
)
# The oldest: the one a duplicate names stays the same while newer copies come and go.
_READY_OF_BYTES = (
    select(*BUILD.columns)
    .where(*_OTHER_READY, Build.sha256 == bindparam("sha256"))
    .order_by(Build.id)
    .limit(1)
)
_READY_OF_VERSION = (
    select(*BUILD.columns)
    .where(
        *_OTHER_READY,
        Build.version_code == bindparam("version_code"),
        Build.sha256 != bindparam("sha256"),
    )
    .order_by(Build.id.desc())
    .limit(1)
)


def version_code_of(metadata: dict[str, Any] | None) -> int | None:
    """A build's version as a number (to sort by, and to compare): an .apk's or .aab's
    versionCode, or an .ipa's buildNumber when it is a whole number."""
    metadata = metadata or {}
    code = metadata.get("versionCode")
    if isinstance(code, int):
        return code
    build_number = metadata.get("buildNumber")
    return whole_number(build_number) if isinstance(build_number, str) else None


async def ready_build_of_bytes(
    reads: Reads, application_id: str, sha256: str, other_than: str = ""
) -> BuildRecord | None:
    """The application's ready build (other than `other_than`) whose bytes have this SHA-256."""
    params = {"application_id": application_id, "build_id": other_than, "sha256": sha256}
    row = await reads.first(_READY_OF_BYTES, params)
    return None if row is None else BUILD.of(row)


async def ready_build_of_version(
    reads: Reads, application_id: str, version_code: int, sha256: str, other_than: str
) -> BuildRecord | None:
    """The application's newest ready build (other than `other_than`) of this version code
    whose bytes are not these."""
    params: dict[str, Any] = {
        "application_id": application_id,
        "build_id": other_than,
        "version_code": version_code,
        "sha256": sha256,
    }
    row = await reads.first(_READY_OF_VERSION, params)
    return None if row is None else BUILD.of(row)


def _named(build: BuildRecord) -> str:
    """`build bld_... (1.4.2 (42))`."""
    label = version_label(build.metadata_)
    return f"build {build.id}" + (f" ({label})" if label else "")


def duplicate_build(existing: BuildRecord, *, reuse_hint: bool) -> Conflict:
    """409 `duplicate_build`, naming the ready build as `buildId` too."""
    detail = f"This file was already uploaded as {_named(existing)}"
    if reuse_hint:
        detail += '; ask with "onDuplicate": "reuse" to be answered that build'
    return Conflict(detail, code="duplicate_build", extensions={"buildId": existing.id})


def version_exists(existing: BuildRecord, version_code: int) -> Conflict:
    """409 `version_exists`: the application's versions are `unique`."""
    return Conflict(
        f"Version code {version_code} is already {_named(existing)}, with other bytes; this "
        "application takes one build per version code: raise the version code",
        code="version_exists",
        extensions={"buildId": existing.id},
    )


def same_version_warning(build: BuildRecord, other_id: str) -> str:
    """The warning's sentence (the API's `warnings`, the build page)."""
    code = version_code_of(build.metadata_)
    shown = f" ({code})" if code is not None else ""
    return f"Build {other_id} has the same version code{shown} with other bytes"

"""A build as read (reads.py gives it): a plain record, free of the database, which the schemas
present and the services take."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from buildbay.builds.enums import BuildStatus


@dataclass(frozen=True, slots=True)
class BuildRecord:
    id: str
    project_id: str
    application_id: str
    file_name: str
    file_size: int
    expected_sha256: str | None
    sha256: str | None
    status: BuildStatus
    notes: str | None
    storage_key: str
    storage_version: str | None
    uploaded_by: str | None
    metadata_: dict[str, Any] | None
    metadata_error: str | None
    has_icon: bool
    mandatory: bool
    created_at: datetime
    expires_at: datetime
    verified_at: datetime | None
    part_size: int | None
    upload_id: str | None
    failure_code: str | None
    sha512: str | None
    architecture: str | None
    sparkle_ed_signature: str | None
    blockmap_size: int | None  # electron-builder's `.blockmap` beside the file (blockmap.py)
    blockmap_sha256: str | None

    @property
    def multipart(self) -> bool:
        return self.part_size is not None


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    """An application's retention rule (builds/retention.py reckons what it deletes)."""

    keep_last: int | None
    keep_days: int | None
    protect_groups: bool = True
    protect_channels: bool = True

    @property
    def deletes_anything(self) -> bool:
        return self.keep_last is not None or self.keep_days is not None


@dataclass(frozen=True, slots=True)
class ReadyBuild:
    """A ready build as retention weighs it."""

    id: str
    file_name: str
    metadata: dict[str, Any] | None
    verified_at: datetime | None
    groups: frozenset[str]
    channels: frozenset[str]
    # Distributed to a group or to someone by e-mail: in testers' hands.
    distributed: bool
    # Its channels where it is rolled out to every install (100%): the build that the installs
    # outside a newer build's staged rollout are offered.
    full_channels: frozenset[str] = frozenset()

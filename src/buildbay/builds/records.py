"""A build as read (reads.py gives it): a plain record, free of the database, which the schemas
present and the services take."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from buildbay.builds.enums import BuildStatus
from buildbay.builds.source import BuildSource


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
    source_commit: str | None
    source_branch: str | None
    source_tag: str | None
    source_repository: str | None
    source_ci_run_url: str | None
    source_pull_request: str | None

    @property
    def multipart(self) -> bool:
        return self.part_size is not None

    @property
    def source(self) -> BuildSource:
        """Where the build came from, as verify was told (builds/source.py)."""
        return BuildSource.of_columns(
            self.source_commit, self.source_branch, self.source_tag, self.source_repository,
            self.source_ci_run_url, self.source_pull_request,
        )  # fmt: skip


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

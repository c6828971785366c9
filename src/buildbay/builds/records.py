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

    @property
    def multipart(self) -> bool:
        return self.part_size is not None

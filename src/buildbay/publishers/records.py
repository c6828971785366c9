"""Trusted publishers as read (reads.py gives them): a plain record, free of the database,
which the schemas present and the services take."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True, slots=True)
class PublisherRecord:
    id: str
    application_id: str
    issuer: str
    subject_pattern: str
    audience: str
    created_by: str | None
    created_at: datetime

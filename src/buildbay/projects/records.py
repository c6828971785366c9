"""Projects and their members as read (reads.py gives them): plain records, free of the
database, which the schemas present and the services take."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from buildbay.projects.enums import ProjectRole


@dataclass(frozen=True, slots=True)
class ProjectRecord:
    id: str
    name: str
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class MemberRecord:
    project_id: str
    user_id: str
    email: str
    name: str
    role: ProjectRole
    created_at: datetime
    # Whether the account proved its address (auth/verification.py): an admin is told when not.
    email_verified: bool = False

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field

from buildbay.auth.schemas import EMAIL_VERIFIED_DESCRIPTION
from buildbay.projects.enums import ProjectRole
from buildbay.projects.records import MemberRecord
from buildbay.schemas import ApiModel, Email, Name, RequestModel, Timestamp

ProjectName = Name


class ProjectWrite(RequestModel):
    EXAMPLE: ClassVar[dict[str, Any] | None] = {"name": "Acme Mobile"}

    name: ProjectName


class Project(ApiModel):
    id: str
    name: str
    applications_count: int
    created_at: Timestamp
    updated_at: Timestamp


class ProjectList(ApiModel):
    projects: list[Project]
    next_cursor: str | None


class MemberCreate(RequestModel):
    EXAMPLE: ClassVar[dict[str, Any] | None] = {"email": "tester@example.com", "role": "tester"}

    email: Email
    role: ProjectRole


class MemberUpdate(RequestModel):
    EXAMPLE: ClassVar[dict[str, Any] | None] = {"role": "developer"}

    role: ProjectRole


class Member(ApiModel):
    user_id: str
    email: str
    name: str
    role: ProjectRole
    created_at: Timestamp
    email_verified: bool = Field(description=EMAIL_VERIFIED_DESCRIPTION)


class MemberList(ApiModel):
    members: list[Member]


def member_schema(member: MemberRecord) -> Member:
    return Member(
        user_id=member.user_id,
        email=member.email,
        name=member.name,
        role=member.role,
        created_at=member.created_at,
        email_verified=member.email_verified,
    )

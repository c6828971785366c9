from __future__ import annotations

from typing import Annotated

from pydantic import EmailStr, Field

from buildbay.projects.models import ProjectRole
from buildbay.schemas import ApiModel, RequestModel, Timestamp, Trimmed

ProjectName = Annotated[str, Field(min_length=1, max_length=100), Trimmed()]


class ProjectWrite(RequestModel):
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
    email: EmailStr
    role: ProjectRole


class MemberUpdate(RequestModel):
    role: ProjectRole


class Member(ApiModel):
    user_id: str
    email: str
    name: str
    role: ProjectRole
    created_at: Timestamp


class MemberList(ApiModel):
    members: list[Member]

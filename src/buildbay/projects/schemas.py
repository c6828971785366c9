from __future__ import annotations

from buildbay.projects.models import ProjectRole
from buildbay.schemas import ApiModel, Email, Name, RequestModel, Timestamp

ProjectName = Name


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
    email: Email
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

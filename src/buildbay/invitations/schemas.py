from __future__ import annotations

from typing import Annotated, Any, ClassVar

from pydantic import Field

from buildbay.invitations.enums import InvitationStatus
from buildbay.projects.enums import ProjectRole
from buildbay.schemas import ApiModel, Email, RequestModel, Timestamp


class InvitationCreate(RequestModel):
    EXAMPLE: ClassVar[dict[str, Any] | None] = {"email": "new.tester@example.com", "role": "tester"}

    email: Email
    role: ProjectRole


class Invitation(ApiModel):
    id: str
    email: str
    role: ProjectRole
    status: InvitationStatus
    invited_by: str | None = Field(description="User id of who sent it (last); null if deleted")
    created_at: Timestamp
    expires_at: Timestamp


class InvitationList(ApiModel):
    invitations: list[Invitation]


class InvitationAccept(RequestModel):
    EXAMPLE: ClassVar[dict[str, Any] | None] = {"token": "bbi_the-token-from-the-invitation-mail"}

    token: Annotated[str, Field(min_length=1, max_length=4096)]

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from pydantic import Field, model_validator

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
    """Which invitation: its link's token, or (for a signed-in person whose e-mail address is
    verified) its id, from `GET /api/account/invitations`."""

    EXAMPLE: ClassVar[dict[str, Any] | None] = {"token": "bbi_the-token-from-the-invitation-mail"}
    ONE_STRING_OF: ClassVar[tuple[str, ...]] = ("token", "invitationId")

    token: Annotated[str, Field(min_length=1, max_length=4096)] | None = Field(
        default=None, description="The token of the invitation mail's link"
    )
    invitation_id: Annotated[str, Field(min_length=1, max_length=64)] | None = Field(
        default=None,
        description="Instead of the token: the invitation's id, for an account whose e-mail "
        "address is verified and is the invited one",
    )

    @model_validator(mode="after")
    def _one_of_them(self) -> InvitationAccept:
        if (self.token is None) == (self.invitation_id is None):
            raise ValueError("Send either token or invitationId")
        return self


class ReceivedInvitation(ApiModel):
    id: str
    project_id: str
    project_name: str
    role: ProjectRole
    invited_by_name: str | None = Field(description="Who sent it (last), by name; null if deleted")
    created_at: Timestamp
    expires_at: Timestamp


class ReceivedInvitationList(ApiModel):
    invitations: list[ReceivedInvitation] = Field(
        description="Pending invitations of your e-mail address, newest first; empty until the "
        "address is verified"
    )

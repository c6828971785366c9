"""Invitations as read (db/reads.py): their records, and the project's list."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import bindparam, select

from buildbay.db.reads import Reads, RecordOf
from buildbay.invitations.enums import InvitationStatus
from buildbay.invitations.models import Invitation, invitation_status
from buildbay.projects.enums import ProjectRole


@dataclass(frozen=True, slots=True)
class InvitationRecord:
    id: str
    email: str
    role: ProjectRole
    invited_by: str | None
    created_at: datetime
    expires_at: datetime
    accepted_at: datetime | None
    revoked_at: datetime | None
    declined_at: datetime | None

    def status_at(self, now: datetime) -> InvitationStatus:
        return invitation_status(
            self.accepted_at, self.revoked_at, self.expires_at, now, self.declined_at
        )


INVITATION = RecordOf(InvitationRecord, Invitation)
_OF_PROJECT = (
    select(*INVITATION.columns)
    .where(Invitation.project_id == bindparam("project_id"))
    .order_by(Invitation.id.desc())
)


async def invitations_of(reads: Reads, project_id: str) -> list[InvitationRecord]:
    """The project's invitations, newest first, whatever their state."""
    return [INVITATION.of(row) for row in await reads.all(_OF_PROJECT, {"project_id": project_id})]


async def invited(reads: Reads, email: str, now: datetime) -> bool:
    """Whether a project invited `email` (normalised) and the invitation can still be taken."""
    row = await reads.first(
        select(Invitation.id)
        .where(
            Invitation.email == email,
            Invitation.accepted_at.is_(None),
            Invitation.revoked_at.is_(None),
            Invitation.declined_at.is_(None),
            Invitation.expires_at > now,
        )
        .limit(1)
    )
    return row is not None

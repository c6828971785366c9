from __future__ import annotations

from datetime import datetime

from sqlalchemy import ForeignKey, Index, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from buildbay.db.base import Base, EnumString
from buildbay.invitations.enums import InvitationStatus
from buildbay.projects.enums import ProjectRole


class Invitation(Base):
    """An e-mail invited into a project with a role. The newest link's token is stored as a
    hash; a resend mails a new link and keeps the earlier ones working (`InvitationLink`)."""

    __tablename__ = "invitations"
    __table_args__ = (Index("ix_invitations_project_id_email", "project_id", "email"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    email: Mapped[str] = mapped_column(String(320))  # normalised, as users' are
    role: Mapped[ProjectRole] = mapped_column(EnumString(ProjectRole))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    invited_by: Mapped[str | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    created_at: Mapped[datetime]
    expires_at: Mapped[datetime]
    accepted_at: Mapped[datetime | None]
    revoked_at: Mapped[datetime | None]
    # The invited person said no (from their projects page): the links stop working.
    declined_at: Mapped[datetime | None] = mapped_column(default=None)

    def status_at(self, now: datetime) -> InvitationStatus:
        return invitation_status(
            self.accepted_at, self.revoked_at, self.expires_at, now, self.declined_at
        )


def invitation_status(
    accepted_at: datetime | None, revoked_at: datetime | None, expires_at: datetime,
    now: datetime, declined_at: datetime | None = None,
) -> InvitationStatus:  # fmt: skip
    if accepted_at is not None:
        return InvitationStatus.ACCEPTED
    if revoked_at is not None:
        return InvitationStatus.REVOKED
    if declined_at is not None:
        return InvitationStatus.DECLINED
    if expires_at <= now:
        return InvitationStatus.EXPIRED
    return InvitationStatus.PENDING


class InvitationLink(Base):
    """An earlier link of an invitation, replaced as the newest by a resend: it works as long
    as the invitation can be taken, so that the first mail's link still does after a resend."""

    __tablename__ = "invitation_links"

    token_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    invitation_id: Mapped[str] = mapped_column(
        ForeignKey("invitations.id", ondelete="CASCADE"), index=True
    )
    created_at: Mapped[datetime]


class InvitationCount(Base):
    """How many invitation mails one address, account or project was sent or sent on one UTC
    day (invitations/caps.py): `key` is `recipient:<sha256 of the address>`,
    `account:<user id>` or `project:<project id>`; `day` the day's ordinal."""

    __tablename__ = "invitation_counts"
    __table_args__ = (Index("ix_invitation_counts_day", "day"),)

    key: Mapped[str] = mapped_column(String(80), primary_key=True)
    day: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    count: Mapped[int] = mapped_column(Integer)


class InvitationBlock(Base):
    """An address whose owner wants no invitation from this server (from the unsubscribe
    page), by the sha256 of the address: the table holds no address in clear."""

    __tablename__ = "invitation_blocks"

    address_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    created_at: Mapped[datetime]

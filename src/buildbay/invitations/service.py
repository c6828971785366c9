"""Inviting an e-mail into a project, and accepting.

An admin (an owner, for the owner role) invites an e-mail with a role: the invitation and its
mail are written in the request's unit of work. Inviting an e-mail that has a pending invitation
sends it again: a new link (the old one stops working), the role given, seven more days. The
link (`PUBLIC_URL/invitations/<token>`) opens a console page where the invited person signs up
or signs in, then accepts: they become a member with the role, if they are signed in with the
invited e-mail. Every state change is a conditional UPDATE, so that two requests at once (two
accepts, an accept and a revoke) cannot both win.

Every invitation mail is counted against the day's caps first, and none goes to an address
that blocked invitations (invitations/caps.py): an invite or resend refused answers 429 (a
cap) or 409 (a block) and writes nothing; `invite_testers`, for several addresses at once,
invites those admitted and says which were not.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.auth.authentication import Principal
from buildbay.auth.models import User
from buildbay.auth.reads import UserRecord
from buildbay.auth.tokens import hash_token
from buildbay.auth.verification import mark_verified
from buildbay.db.concurrency import insert_unless_present, lock_row
from buildbay.distribution.membership import join_invited_groups, reach_new_member
from buildbay.errors import Conflict, Forbidden, NotFound, ValidationFailed
from buildbay.ids import new_id
from buildbay.invitations.caps import (
    Admission,
    CapsOf,
    InvitationCaps,
    InvitationsLimited,
    recipient_blocked,
)
from buildbay.invitations.enums import InvitationStatus
from buildbay.invitations.models import Invitation
from buildbay.mail.message import notification
from buildbay.mail.outbox import MailOutbox
from buildbay.mail.unsubscribe import UnsubscribeLinks
from buildbay.projects.authorization import ProjectAccess
from buildbay.projects.enums import ProjectRole
from buildbay.projects.models import Project, ProjectMember
from buildbay.projects.records import MemberRecord, ProjectRecord
from buildbay.projects.service import require_owner_for_owner_role
from buildbay.text import normal_email_text
from buildbay.webhooks import events as webhook_events

INVITATION_LIFETIME = timedelta(days=7)
INVITATION_TOKEN_PREFIX = "bbi_"
INVITATION_PAGE = "/invitations"


@dataclass(frozen=True, slots=True)
class InvitationView:
    """An invitation as its acceptance page shows it."""

    invitation: Invitation
    project: Project
    inviter: User | None
    status: InvitationStatus


@dataclass(frozen=True, slots=True)
class TestersInvited:
    """What `invite_testers` did: each address invited (a pending invitation, or a new one
    mailed now) with its invitation's id, and the admission of those it had to mail."""

    invitations: dict[str, str]
    mailed: list[str]
    admission: Admission


def invitation_link(public_url: str, token: str) -> str:
    return f"{public_url}{INVITATION_PAGE}/{token}"


class InvitationService:
    def __init__(
        self, db: AsyncSession, now: datetime, mail: MailOutbox, public_url: str,
        caps: CapsOf, unsubscribe: UnsubscribeLinks,
    ) -> None:  # fmt: skip
        self.db = db
        self.now = now
        self.mail = mail
        self.public_url = public_url
        self.caps = InvitationCaps(db, now, caps)
        self.unsubscribe = unsubscribe

    async def invite(self, access: ProjectAccess, email: str, role: ProjectRole) -> Invitation:
        require_owner_for_owner_role(access, role)
        email = normal_email_text(email)
        project = access.project
        # One invitation at a time per e-mail and project: two invites at once take turns.
        if not await lock_row(self.db, Project.id, project.id):
            raise NotFound("No project with this id", code="project_not_found")
        member = await self.db.scalar(
            select(ProjectMember.user_id)
            .join(User, User.id == ProjectMember.user_id)
            .where(ProjectMember.project_id == project.id, User.email == email)
        )
        if member is not None:
            raise Conflict("This e-mail is already a member of the project", code="already_member")
        admission = await self.caps.admit(access, [email])
        if admission.capped:
            raise InvitationsLimited(admission, [])
        if admission.refused:
            raise recipient_blocked(email)
        return await self._invite(access, email, role)

    async def invite_testers(self, access: ProjectAccess, emails: Sequence[str]) -> TestersInvited:
        """Invite addresses (normalised, each once, none a member's) as testers: one with a
        pending invitation keeps it (not mailed again, its role kept); the others are invited
        and mailed as far as the caps let, in the order given."""
        if not await lock_row(self.db, Project.id, access.project.id):
            raise NotFound("No project with this id", code="project_not_found")
        pending = dict(
            (
                await self.db.execute(
                    select(Invitation.email, Invitation.id).where(
                        Invitation.project_id == access.project.id,
                        Invitation.email.in_(list(emails)),
                        Invitation.accepted_at.is_(None),
                        Invitation.revoked_at.is_(None),
                        Invitation.expires_at > self.now,
                    )
                )
            ).all()
        )
        admission = await self.caps.admit(access, [e for e in emails if e not in pending])
        for email in admission.admitted:
            invitation = await self._invite(access, email, ProjectRole.TESTER)
            pending[email] = invitation.id
        invited = {email: pending[email] for email in emails if email in pending}
        return TestersInvited(invited, admission.admitted, admission)

    async def _invite(self, access: ProjectAccess, email: str, role: ProjectRole) -> Invitation:
        """Invite (or invite again) an address the caps admitted, and mail it."""
        project = access.project
        token = INVITATION_TOKEN_PREFIX + secrets.token_urlsafe(32)
        invitation = await self._pending(project.id, email)
        if invitation is None:
            invitation = Invitation(
                id=new_id("inv"),
                project_id=project.id,
                email=email,
                created_at=self.now,
                accepted_at=None,
                revoked_at=None,
            )
            self.db.add(invitation)
        invitation.role = role
        invitation.token_hash = hash_token(token)
        invitation.invited_by = access.caller.user.id
        invitation.expires_at = self.now + INVITATION_LIFETIME
        await self.db.flush()
        self._mail(invitation, project, access.caller.user, token)
        return invitation

    async def resend(self, access: ProjectAccess, invitation_id: str) -> Invitation:
        """Invite the e-mail of an invitation again, with its role (the console's Resend)."""
        invitation = await self._of_project(access.project, invitation_id)
        if invitation.accepted_at is not None:
            raise Conflict("This invitation was accepted already", code="invitation_accepted")
        return await self.invite(access, invitation.email, invitation.role)

    async def revoke(self, project: ProjectRecord, invitation_id: str) -> None:
        """The link stops working; a revoked or expired invitation may be revoked again."""
        invitation = await self._of_project(project, invitation_id)
        revoked = await self.db.execute(
            update(Invitation)
            .where(
                Invitation.id == invitation.id,
                Invitation.accepted_at.is_(None),
                Invitation.revoked_at.is_(None),
            )
            .values(revoked_at=self.now)
            .execution_options(synchronize_session=False)
        )
        if not revoked.rowcount:  # type: ignore[attr-defined]
            await self.db.refresh(invitation)
            if invitation.accepted_at is not None:
                raise Conflict(
                    "This invitation was accepted already; remove the member instead",
                    code="invitation_accepted",
                )

    async def view(self, token: str) -> InvitationView:
        """The invitation of a link, for its page; 404 for a link this server never sent (or
        one replaced by a resend)."""
        row = (
            await self.db.execute(
                select(Invitation, Project, User)
                .join(Project, Project.id == Invitation.project_id)
                .outerjoin(User, User.id == Invitation.invited_by)
                .where(Invitation.token_hash == hash_token(token))
            )
        ).first()
        if row is None:
            raise NotFound(
                "This invitation link is not valid: it may have been replaced by a newer one",
                code="invitation_not_found",
            )
        invitation, project, inviter = row
        return InvitationView(invitation, project, inviter, invitation.status_at(self.now))

    async def accept(self, caller: Principal, token: str) -> MemberRecord:
        """Make the caller a member with the invitation's role."""
        view = await self.view(token)
        invitation = view.invitation
        user = await self.db.get_one(User, caller.user.id)
        if invitation.email != user.email:
            raise Forbidden(
                f"This invitation is for {invitation.email}; sign in with that e-mail to accept it",
                code="invitation_email_mismatch",
            )
        claimed = await self.db.execute(
            update(Invitation)
            .where(
                Invitation.id == invitation.id,
                Invitation.accepted_at.is_(None),
                Invitation.revoked_at.is_(None),
                Invitation.expires_at > self.now,
            )
            .values(accepted_at=self.now)
            .execution_options(synchronize_session=False)
        )
        if not claimed.rowcount:  # type: ignore[attr-defined]
            raise ValidationFailed.for_field(
                "token",
                "this invitation was used, revoked or has expired; ask for a new one",
                code="invitation_expired",
            )
        # The link came by mail to the invited address, which is the caller's: proven.
        mark_verified(user, self.now)
        fields = {"project_id": invitation.project_id, "user_id": user.id,
                  "role": invitation.role, "created_at": self.now}  # fmt: skip
        if not await insert_unless_present(self.db, ProjectMember, fields):
            raise Conflict("You are already a member of this project", code="already_member")
        groups = await join_invited_groups(self.db, invitation.id, user.id, self.now)
        await reach_new_member(
            self.db, self.now, invitation.project_id, user.id, user.email, groups
        )
        joined = MemberRecord(
            invitation.project_id, user.id, user.email, user.name, invitation.role, self.now,
            user.email_verified,
        )  # fmt: skip
        await webhook_events.member_added(self.db, joined, self.now)
        return joined

    # -- helpers --------------------------------------------------------------------------------

    async def _pending(self, project_id: str, email: str) -> Invitation | None:
        return await self.db.scalar(
            select(Invitation).where(
                Invitation.project_id == project_id,
                Invitation.email == email,
                Invitation.accepted_at.is_(None),
                Invitation.revoked_at.is_(None),
                Invitation.expires_at > self.now,
            )
        )

    async def _of_project(self, project: ProjectRecord, invitation_id: str) -> Invitation:
        invitation = await self.db.scalar(
            select(Invitation).where(
                Invitation.id == invitation_id, Invitation.project_id == project.id
            )
        )
        if invitation is None:
            raise NotFound("No invitation with this id in the project", code="invitation_not_found")
        return invitation

    def _mail(
        self, invitation: Invitation, project: ProjectRecord, inviter: UserRecord, token: str
    ) -> None:
        mail = notification(
            "invitation",
            invitation.email,
            f"{inviter.name} invited you to {project.name} on Buildbay",
            self.unsubscribe.address_url(invitation.email),
            inviter=inviter.name,
            project=project.name,
            role=invitation.role.value,
            link=invitation_link(self.public_url, token),
        )
        self.mail.send(self.db, mail, self.now)

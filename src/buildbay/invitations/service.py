"""Inviting an e-mail into a project, and accepting.

An admin (an owner, for the owner role) invites an e-mail with a role: the invitation and its
mail are written in the request's unit of work. Inviting an e-mail that has an invitation not
yet taken (pending, or expired) sends it again: the same invitation (its groups kept), a new
mail with a new link, the role given, seven more days; the links of the earlier mails keep
working (`InvitationLink`), so a person who opens the first mail is not turned away. The link
(`PUBLIC_URL/invitations/<token>`) opens a console page where the invited person signs up or
signs in, then accepts: they become a member with the role, if they are signed in with the
invited e-mail. A signed-in person whose e-mail address is verified also sees their pending
invitations on their projects page (`received`), and accepts or declines them there without
the link. Every state change is a conditional UPDATE, so that two requests at once (two
accepts, an accept and a revoke, an accept and a decline) cannot both win.

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

from sqlalchemy import ColumnElement, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.audit.record import Actor, AuditAction, Target, record
from buildbay.auth.authentication import Principal
from buildbay.auth.models import User
from buildbay.auth.reads import UserRecord
from buildbay.auth.tokens import hash_token
from buildbay.auth.verification import mark_verified
from buildbay.db.concurrency import insert_unless_present, lock_row
from buildbay.distribution.membership import (
    join_invited_groups,
    mail_newest_on_joining,
    reach_new_member,
)
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
from buildbay.invitations.models import Invitation, InvitationLink
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


@dataclass(frozen=True, slots=True)
class ReceivedInvitation:
    """A pending invitation of the caller's e-mail, as their projects page lists it."""

    id: str
    project_id: str
    project_name: str
    role: ProjectRole
    inviter: str | None  # by name; None: the account was deleted
    created_at: datetime
    expires_at: datetime


def _takeable(now: datetime) -> tuple[ColumnElement[bool], ...]:
    """The conditions of an invitation that can still be accepted or declined."""
    return (
        Invitation.accepted_at.is_(None),
        Invitation.revoked_at.is_(None),
        Invitation.declined_at.is_(None),
        Invitation.expires_at > now,
    )


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
                        *_takeable(self.now),
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
        invitation = await self._open(project.id, email)
        if invitation is not None:
            # Sent again: the earlier mails' links keep working with the new one.
            earlier = InvitationLink(
                token_hash=invitation.token_hash, invitation_id=invitation.id, created_at=self.now
            )
            self.db.add(earlier)
        else:
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
        self._record(Actor.of(access.caller.user), AuditAction.INVITATION_SENT, invitation)
        return invitation

    async def resend(self, access: ProjectAccess, invitation_id: str) -> Invitation:
        """Invite the e-mail of an invitation again, with its role (the console's Resend): the
        same invitation, pending or expired, with a new mail; the earlier links keep working."""
        invitation = await self._of_project(access.project, invitation_id)
        if invitation.accepted_at is not None:
            raise Conflict("This invitation was accepted already", code="invitation_accepted")
        return await self.invite(access, invitation.email, invitation.role)

    async def revoke(self, project: ProjectRecord, invitation_id: str, *, by: Actor) -> None:
        """The link stops working; a revoked or expired invitation may be revoked again."""
        invitation = await self._of_project(project, invitation_id)
        revoked = await self.db.execute(
            update(Invitation)
            .where(
                Invitation.id == invitation.id,
                Invitation.accepted_at.is_(None),
                Invitation.revoked_at.is_(None),
                Invitation.declined_at.is_(None),
            )
            .values(revoked_at=self.now)
            .execution_options(synchronize_session=False)
        )
        if revoked.rowcount:  # type: ignore[attr-defined]
            self._record(by, AuditAction.INVITATION_REVOKED, invitation)
        else:
            await self.db.refresh(invitation)
            if invitation.accepted_at is not None:
                raise Conflict(
                    "This invitation was accepted already; remove the member instead",
                    code="invitation_accepted",
                )

    async def view(self, token: str) -> InvitationView:
        """The invitation of a link (its newest or an earlier mail's), for its page; 404 for a
        link this server never sent (or one replaced before earlier links were kept)."""
        hashed = hash_token(token)
        earlier = select(InvitationLink.invitation_id).where(InvitationLink.token_hash == hashed)
        row = (
            await self.db.execute(
                select(Invitation, Project, User)
                .join(Project, Project.id == Invitation.project_id)
                .outerjoin(User, User.id == Invitation.invited_by)
                .where(or_(Invitation.token_hash == hashed, Invitation.id.in_(earlier)))
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
        invitation = (await self.view(token)).invitation
        user = await self._invited_one(caller, invitation, "accept")
        await self._claim(invitation, "token", accepted_at=self.now)
        # The link came by mail to the invited address, which is the caller's: proven.
        mark_verified(user, self.now)
        return await self._join(invitation, user)

    async def received(self, caller: Principal) -> list[ReceivedInvitation]:
        """The pending invitations of the caller's e-mail, newest first; none until that
        address is verified (an account made with someone else's address sees nothing)."""
        user = await self.db.get_one(User, caller.user.id)
        if not user.email_verified:
            return []
        rows = await self.db.execute(
            select(Invitation, Project.name, User.name)
            .join(Project, Project.id == Invitation.project_id)
            .outerjoin(User, User.id == Invitation.invited_by)
            .where(Invitation.email == user.email, *_takeable(self.now))
            .order_by(Invitation.created_at.desc(), Invitation.id.desc())
        )
        return [
            ReceivedInvitation(
                i.id, i.project_id, project, i.role, inviter, i.created_at, i.expires_at
            )
            for i, project, inviter in rows.all()
        ]

    async def waiting_unverified(self, caller: Principal) -> bool:
        """Whether the caller's e-mail, not verified yet, has a pending invitation (which
        `received` does not show until it is: the page says how to reach it)."""
        user = await self.db.get_one(User, caller.user.id)
        if user.email_verified:
            return False
        found = await self.db.scalar(
            select(Invitation.id)
            .where(Invitation.email == user.email, *_takeable(self.now))
            .limit(1)
        )
        return found is not None

    async def accept_received(self, caller: Principal, invitation_id: str) -> MemberRecord:
        """Accept one of `received` (no link: the caller's verified address is the proof)."""
        invitation, user = await self._received(caller, invitation_id, "accept")
        await self._claim(invitation, "invitationId", accepted_at=self.now)
        return await self._join(invitation, user)

    async def decline(
        self, caller: Principal, *, token: str | None = None, invitation_id: str | None = None
    ) -> Invitation:
        """The invited person says no: the invitation and its links stop working; the project
        may invite them again."""
        if token is not None:
            invitation = (await self.view(token)).invitation
            await self._invited_one(caller, invitation, "decline")
        else:
            invitation, _ = await self._received(caller, invitation_id or "", "decline")
        await self._claim(invitation, "token" if token else "invitationId", declined_at=self.now)
        invitation.declined_at = self.now
        return invitation

    async def _received(
        self, caller: Principal, invitation_id: str, verb: str
    ) -> tuple[Invitation, User]:
        invitation = await self.db.get(Invitation, invitation_id)
        if invitation is None:
            raise NotFound("No invitation with this id", code="invitation_not_found")
        user = await self._invited_one(caller, invitation, verb)
        if not user.email_verified:
            raise Forbidden(
                f"Verify your e-mail address first (the link in the mail sent at sign-up), or "
                f"open the invitation mail's link to {verb} it",
                code="address_not_verified",
            )
        return invitation, user

    async def _invited_one(self, caller: Principal, invitation: Invitation, verb: str) -> User:
        """The caller, if the invitation is for their e-mail."""
        user = await self.db.get_one(User, caller.user.id)
        if invitation.email != user.email:
            raise Forbidden(
                f"This invitation is for {invitation.email}; sign in with that e-mail to {verb} it",
                code="invitation_email_mismatch",
            )
        return user

    async def _claim(self, invitation: Invitation, field: str, **values: datetime) -> None:
        """Take the invitation (accept or decline it) if it can still be taken."""
        claimed = await self.db.execute(
            update(Invitation)
            .where(Invitation.id == invitation.id, *_takeable(self.now))
            .values(**values)
            .execution_options(synchronize_session=False)
        )
        if not claimed.rowcount:  # type: ignore[attr-defined]
            raise ValidationFailed.for_field(
                field,
                "this invitation was used, revoked, declined or has expired; ask for a new one",
                code="invitation_expired",
            )

    async def _join(self, invitation: Invitation, user: User) -> MemberRecord:
        fields = {"project_id": invitation.project_id, "user_id": user.id,
                  "role": invitation.role, "created_at": self.now}  # fmt: skip
        if not await insert_unless_present(self.db, ProjectMember, fields):
            raise Conflict("You are already a member of this project", code="already_member")
        groups = await join_invited_groups(self.db, invitation.id, user.id, self.now)
        await reach_new_member(
            self.db, self.now, invitation.project_id, user.id, user.email, groups
        )
        # Never told of the builds given to them while invited: the newest of each application.
        await mail_newest_on_joining(self.db, self.now, invitation.project_id, user.id)
        joined = MemberRecord(
            invitation.project_id, user.id, user.email, user.name, invitation.role, self.now,
            user.email_verified,
        )  # fmt: skip
        await webhook_events.member_added(self.db, joined, self.now)
        self._record(Actor.of(user), AuditAction.INVITATION_ACCEPTED, invitation, user.id)
        return joined

    def _record(
        self,
        by: Actor,
        action: AuditAction,
        invitation: Invitation,
        subject_user_id: str | None = None,
    ) -> None:
        """An entry about an invitation: its address and role, never its token."""
        record(self.db, at=self.now, actor=by, action=action,
               target=Target("invitation", invitation.id, invitation.email),
               project_id=invitation.project_id, subject_user_id=subject_user_id,
               details={"role": ProjectRole(invitation.role).value})  # fmt: skip

    # -- helpers --------------------------------------------------------------------------------

    async def _open(self, project_id: str, email: str) -> Invitation | None:
        """The e-mail's invitation into the project not yet taken nor withdrawn, pending or
        expired (the newest, were there several from before this rule)."""
        return await self.db.scalar(
            select(Invitation)
            .where(
                Invitation.project_id == project_id,
                Invitation.email == email,
                Invitation.accepted_at.is_(None),
                Invitation.revoked_at.is_(None),
                Invitation.declined_at.is_(None),
            )
            .order_by(Invitation.created_at.desc(), Invitation.id.desc())
            .limit(1)
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

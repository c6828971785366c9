"""The team's triage of feedback: its status and who it is assigned to (told by a
`feedback.updated` webhook event), and the team's comments, each mailed to the tester who sent
the feedback.

Who gets a comment's mail: the member who sent the feedback, while they are a member of the
project, unless they wrote the comment themselves or blocked mail from this server on the
unsubscribe page. No notification setting fits (the only one, `notifyNewBuilds`, is about new
builds): a reply is an answer to what the tester sent, mailed once per comment, and carries no
unsubscribe link that would turn off something else. A reporter named only by `reporterEmail`
(an app holding the application's update key sent it) gets no mail: anyone holding the key,
which ships inside every copy of the app, can name any address there, so mailing it would let
them point the team's replies, under this server's name, at strangers who never wrote.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.applications.models import Application
from buildbay.auth.models import User
from buildbay.builds.models import Build
from buildbay.builds.schemas import version_label
from buildbay.console_urls import feedback_url, own_feedback_url
from buildbay.db.reads import Reads
from buildbay.errors import ValidationFailed
from buildbay.feedback.enums import FeedbackStatus
from buildbay.feedback.links import ScreenshotLinks
from buildbay.feedback.models import Feedback, FeedbackComment
from buildbay.feedback.reads import (
    CommentRecord,
    FeedbackReads,
    FeedbackViewer,
    InboxItem,
    PersonRecord,
    feedback_not_found,
    person_schema,
    present,
)
from buildbay.ids import new_id
from buildbay.invitations.caps import blocked_addresses
from buildbay.mail.headers import UnmailableAddress
from buildbay.mail.message import render
from buildbay.mail.outbox import MailOutbox
from buildbay.projects.authorization import ProjectAccess
from buildbay.projects.enums import ProjectRole
from buildbay.projects.models import ProjectMember
from buildbay.text import BIDI_CONTROLS, CONTROL
from buildbay.webhooks.events import Data, EventType, emit

# The team's view, as a webhook event shows it (to the project's admins' receivers).
TEAM = FeedbackViewer(user_id="", team=True)
# How much of the tester's own feedback a reply's mail quotes.
QUOTED = 500

# Of what users typed, a mail's body keeps line breaks and tabs; other control characters and
# the bidirectional controls (which make text read otherwise than it is) go.
_MAIL_UNSAFE = str.maketrans(dict.fromkeys(map(ord, (CONTROL + BIDI_CONTROLS).replace("\n", ""))))


def mail_text(value: str, limit: int | None = None) -> str:
    """User text as a mail's body shows it: line ends as `\\n`, tabs kept, other control and
    bidirectional control characters gone; cut at `limit` characters (with an ellipsis)."""
    text = value.replace("\r\n", "\n").replace("\r", "\n").replace("\t", "    ")
    text = text.translate(_MAIL_UNSAFE)
    if limit is not None and len(text) > limit:
        text = text[:limit].rstrip() + "…"
    return text


class TriageService:
    def __init__(
        self,
        db: AsyncSession,
        now: datetime,
        mail: MailOutbox,
        links: ScreenshotLinks,
        public_url: str,
    ) -> None:
        self.db = db
        self.now = now
        self.mail = mail
        self.links = links
        self.public_url = public_url
        self.reads = FeedbackReads(Reads.within(db), now, links)

    async def update(
        self, access: ProjectAccess, feedback_id: str, changes: dict[str, Any]
    ) -> InboxItem:
        """`changes` may hold `status` and `assignee` (a user id, or None: nobody). The
        assignee must be a developer, admin or owner of the project (422 naming `assignee`).
        A change is told by a `feedback.updated` event; the same values again change nothing."""
        feedback = await self._feedback(access.project.id, feedback_id)
        previous: dict[str, Any] = {}
        if "assignee" in changes and changes["assignee"] != feedback.assignee_id:
            if changes["assignee"] is not None:
                await self._require_assignable(access.project.id, changes["assignee"])
            previous["assignee"] = feedback.assignee_id
            feedback.assignee_id = changes["assignee"]
        status = changes.get("status")
        if status is not None and FeedbackStatus(status) is not feedback.status:
            previous["status"] = feedback.status.value
            feedback.status = FeedbackStatus(status)
        if previous:
            feedback.updated_at = self.now
            await self.db.flush()
            await self._tell_updated(access, feedback, previous)
        return await self.reads.one(access.project.id, feedback.id, TEAM)

    async def comment(self, access: ProjectAccess, feedback_id: str, text: str) -> CommentRecord:
        """The caller's comment on the feedback, mailed to the tester who sent it (see the
        module's docstring for when)."""
        feedback = await self._feedback(access.project.id, feedback_id)
        caller = access.caller.user
        comment = FeedbackComment(
            id=new_id("fbc"),
            feedback_id=feedback.id,
            author_id=caller.id,
            text=text,
            created_at=self.now,
        )
        self.db.add(comment)
        await self.db.flush()
        author = PersonRecord(caller.id, caller.email, caller.name)
        await self._mail_reporter(access, feedback, comment, author)
        return CommentRecord(comment.id, feedback.id, author, comment.text, comment.created_at)

    async def _feedback(self, project_id: str, feedback_id: str) -> Feedback:
        found = await self.db.scalar(
            select(Feedback).where(Feedback.id == feedback_id, Feedback.project_id == project_id)
        )
        if found is None:
            raise feedback_not_found()
        return found

    async def _require_assignable(self, project_id: str, user_id: str) -> None:
        role = await self.db.scalar(
            select(ProjectMember.role).where(
                ProjectMember.project_id == project_id, ProjectMember.user_id == user_id
            )
        )
        if role is None:
            raise ValidationFailed.for_field(
                "assignee", "is not a member of this project", code="invalid_assignee"
            )
        if not ProjectRole(role).includes(ProjectRole.DEVELOPER):
            raise ValidationFailed.for_field(
                "assignee",
                f"is a {ProjectRole(role).value} of this project; feedback is assigned to a "
                "developer, admin or owner",
                code="invalid_assignee",
            )

    async def _tell_updated(
        self, access: ProjectAccess, feedback: Feedback, previous: dict[str, Any]
    ) -> None:
        """A `feedback.updated` event: the feedback as the team sees it (its screenshots'
        addresses working for days, as in `feedback.created`: a chat's readers open them
        later), what tells of it on its own, and what it was before (`previous`: the fields
        that changed)."""
        project = access.project

        async def data() -> Data:
            shown = await self.reads.one(project.id, feedback.id, TEAM)
            links, now = self.links, self.now
            [schema] = present([shown], TEAM, lambda shot: links.for_event(shot.id, now))
            was: dict[str, Any] = {}
            if "status" in previous:
                was["status"] = previous["status"]
            if "assignee" in previous:
                was["assignee"] = await self._person(previous["assignee"])
            return {
                **schema.model_dump(mode="json", by_alias=True),
                "projectName": project.name,
                "version": shown.build_version,
                "consoleUrl": feedback_url(self.public_url, project.id, feedback.id),
                "previous": was,
            }

        await emit(self.db, project.id, EventType.FEEDBACK_UPDATED, data, self.now)

    async def _person(self, user_id: str | None) -> dict[str, Any] | None:
        if user_id is None:
            return None
        row = (
            await self.db.execute(select(User.id, User.email, User.name).where(User.id == user_id))
        ).first()
        if row is None:
            return None
        person = person_schema(PersonRecord(row.id, row.email, row.name), TEAM)
        return None if person is None else person.model_dump(mode="json", by_alias=True)

    async def _mail_reporter(
        self,
        access: ProjectAccess,
        feedback: Feedback,
        comment: FeedbackComment,
        author: PersonRecord,
    ) -> None:
        if feedback.tester_id is None or feedback.tester_id == author.id:
            return
        # A member still (a former one has lost the project, and its pages).
        email = await self.db.scalar(
            select(User.email)
            .join(ProjectMember, ProjectMember.user_id == User.id)
            .where(User.id == feedback.tester_id, ProjectMember.project_id == feedback.project_id)
        )
        if email is None or await blocked_addresses(self.db, [email]):
            return
        row = (
            await self.db.execute(
                select(Application.name, Build.metadata_)
                .join(Build, Build.application_id == Application.id)
                .where(Build.id == feedback.build_id)
            )
        ).one()
        application, version = row[0], version_label(row[1])
        message = render(
            "feedback_reply",
            email,
            f"{author.name} replied to your feedback on {application}",
            author=author.name,
            application=application,
            version=version,
            project=access.project.name,
            reply=mail_text(comment.text),
            feedback=mail_text(feedback.text, QUOTED),
            sent=feedback.created_at.strftime("%Y-%m-%d %H:%M UTC"),
            # The tester's own feedback, where the team's replies are (console/tester_feedback.py).
            page=own_feedback_url(self.public_url, feedback.id),
        )
        try:
            self.mail.send(self.db, message, self.now)
        except UnmailableAddress:
            return  # an address stored before today's rules: the comment stands

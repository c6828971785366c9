"""Sending feedback on a build: who may (`Senders`, the rules of docs/feedback.md's "Who may
send"), and the feedback with its screenshots stored and told of (`FeedbackService.create`).

The screenshots' objects are written before the feedback's rows, in the request's unit of work:
removed again if it does not commit (db/engine.py `unless_committed`), so that no feedback is
ever without its screenshots, and a crash between the two leaves only objects no row names,
which the sweeper removes (builds/sweeper.py). A feedback goes with its build, application or
project: its rows by the database's cascade, its objects as the build's own file goes
(feedback/removal.py).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Table, bindparam, exists, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.applications.models import Application
from buildbay.applications.reads import APPLICATION
from buildbay.auth.authentication import Principal
from buildbay.auth.models import User
from buildbay.auth.reads import user_by_id
from buildbay.builds.enums import BuildStatus
from buildbay.builds.install import InstallLinkReads
from buildbay.builds.models import Build
from buildbay.builds.reads import BuildReads, not_in_application
from buildbay.builds.records import BuildRecord
from buildbay.builds.schemas import version_label
from buildbay.console_urls import feedback_url
from buildbay.db.concurrency import lock_row
from buildbay.db.engine import insert_rows, unless_committed
from buildbay.db.reads import Reads
from buildbay.distribution.models import EVERYONE, BuildGroup
from buildbay.errors import Conflict, Forbidden, Gone, ValidationFailed
from buildbay.feedback.enums import FeedbackMode, FeedbackStatus
from buildbay.feedback.images import Reencoded
from buildbay.feedback.links import ScreenshotLinks
from buildbay.feedback.models import Feedback, FeedbackScreenshot
from buildbay.feedback.records import (
    FeedbackRecord,
    ScreenshotRecord,
    Sender,
    SentBy,
    ShownFeedback,
    TesterRecord,
)
from buildbay.feedback.removal import screenshot_key
from buildbay.feedback.schemas import feedback_schema
from buildbay.feedback.submission import REPORTER_EMAIL, Submission
from buildbay.feedback.triage import mail_text
from buildbay.ids import new_id
from buildbay.mail.message import Mail, render
from buildbay.mail.outbox import MailOutbox
from buildbay.projects.authorization import ProjectAccess, application_of, tester_of
from buildbay.projects.enums import ProjectRole
from buildbay.projects.models import Project, ProjectMember
from buildbay.storage.base import Storage
from buildbay.updates.check import key_owner, unknown_key
from buildbay.webhooks import events as webhook_events

MAIL_TEXT_SHOWN = 2_000  # characters of the feedback a mail quotes


# -- who may send ----------------------------------------------------------------------------------

_APPLICATION_BY_ID = select(*APPLICATION.columns).where(Application.id == bindparam("app_id"))
_FEEDBACK_MAIL = select(ProjectMember.feedback_mail).where(
    ProjectMember.project_id == bindparam("project_id"),
    ProjectMember.user_id == bindparam("user_id"),
)
_TO_EVERYONE = select(
    exists().where(BuildGroup.build_id == bindparam("build_id"), BuildGroup.group_id == EVERYONE)
)


def _ready(build: BuildRecord) -> BuildRecord:
    if build.status is not BuildStatus.READY:
        raise Conflict(
            "Feedback is sent on a ready build; this one is not ready yet", code="build_not_ready"
        )
    return build


class Senders:
    """Who may send feedback on a build, read on `reads` (a short read of the request's own:
    nothing is held while the body arrives)."""

    def __init__(
        self, reads: Reads, now: datetime, builds: BuildReads, links: InstallLinkReads
    ) -> None:
        self.reads = reads
        self.now = now
        self.builds = builds
        self.links = links

    async def member(
        self, caller: Principal, project_id: str, app_id: str, build_id: str
    ) -> Sender:
        """A signed-in member: a tester to whom the build is distributed (else 403
        `not_distributed`), or a developer or above. An API token must be one without a scope
        (feedback is a person's, not a pipeline's)."""
        access = await application_of(
            self.reads, caller, project_id, app_id, ProjectRole.TESTER, scope=None
        )
        build = _ready(await self.builds.get(access.application.id, build_id, tester_of(access)))
        user = caller.user
        return Sender(access.application, build, TesterRecord(user.id, user.email), SentBy.MEMBER)

    async def install_link(
        self,
        token: str,
        project_id: str,
        app_id: str,
        build_id: str,
        visitor: Callable[[], Awaitable[str | None]] | None = None,
    ) -> Sender:
        """The person of a personal install link of this build, while the link works for them
        (builds/install.py `open`: 404, 410 as its page answers; 403 to someone else signed in
        on this browser, `visitor`). A shared link names nobody: 403."""
        target = await self.links.open(token, visitor)
        if target.link.owner_id is None:
            raise Forbidden(
                "A shared install link names no tester: send feedback from your own install "
                "link, signed in, or from the app with the update key and your e-mail",
                code="install_link_not_personal",
            )
        application = target.application
        if (target.build.id, application.id, application.project_id) != (
            build_id,
            app_id,
            project_id,
        ):
            raise Forbidden(
                "This install link is for another build", code="install_link_not_for_this_build"
            )
        person = await user_by_id(self.reads, target.link.owner_id)
        if person is None:
            raise Gone("This install link was revoked", code="install_link_revoked")
        tester = TesterRecord(person.id, person.email)
        return Sender(application, _ready(target.build), tester, SentBy.INSTALL_LINK)

    async def update_key(self, key: str, project_id: str, app_id: str, build_id: str) -> Sender:
        """An app holding its application's update key (404 `unknown_update_key` as the update
        check answers; 403 for another application's), where the application takes feedback
        from anyone with it, on a build distributed to `everyone` (what the update check
        offers: its key ships in every copy of the app)."""
        owner = await key_owner(self.reads, key, self.now)
        if (owner.application_id, owner.project_id) != (app_id, project_id):
            raise Forbidden(
                "This update key is another application's", code="update_key_not_for_application"
            )
        row = await self.reads.first(_APPLICATION_BY_ID, {"app_id": app_id})
        if row is None:  # deleted since its key was read
            raise unknown_key()
        application = APPLICATION.of(row)
        if application.feedback_mode is not FeedbackMode.ANYONE_WITH_UPDATE_KEY:
            raise Forbidden(
                "This application takes feedback from its testers only (feedbackMode "
                '"testers-only"): send it signed in, or through your install link',
                code="feedback_from_testers_only",
            )
        build = _ready(await self.builds.get(application.id, build_id))
        if not await self.reads.scalar(_TO_EVERYONE, {"build_id": build.id}):
            raise Forbidden(
                "This build is not distributed to everyone: the update key reaches only the "
                "builds every tester may open",
                code="not_distributed",
            )
        return Sender(application, build, None, SentBy.UPDATE_KEY)


# -- sending -------------------------------------------------------------------------------------


_FEEDBACK_TABLE = cast("Table", Feedback.__table__)
_SCREENSHOTS_TABLE = cast("Table", FeedbackScreenshot.__table__)
_DEVELOPERS = [role for role in ProjectRole if role.includes(ProjectRole.DEVELOPER)]
# Who gets a mail for each feedback: the project's developers and above who asked for one.
_MAIL_TO = (
    select(User.id, User.email)
    .join(ProjectMember, ProjectMember.user_id == User.id)
    .where(
        ProjectMember.project_id == bindparam("project_id"),
        ProjectMember.feedback_mail.is_(True),
        ProjectMember.role.in_(_DEVELOPERS),
    )
    .order_by(User.id)
)
_NAMES = (
    select(Project.name.label("project"), Application.name.label("application"))
    .join(Application, Application.project_id == Project.id)
    .where(Application.id == bindparam("app_id"))
)


@dataclass(frozen=True, slots=True)
class _Told:
    """What the mail says of the build."""

    project: str
    application: str
    version: str


class FeedbackService:
    """Feedback, in a unit of work."""

    def __init__(
        self,
        db: AsyncSession,
        now: datetime,
        storage: Storage,
        links: ScreenshotLinks,
        mail: MailOutbox,
        public_url: str,
    ) -> None:
        self.db = db
        self.now = now
        self.storage = storage
        self.links = links
        self.mail = mail
        self.public_url = public_url
        self.reads = Reads.within(db)

    async def create(
        self, sender: Sender, submission: Submission, screenshots: list[Reencoded]
    ) -> ShownFeedback:
        """The feedback `sender` sends: its screenshots (`screenshots`, re-encoded, in order)
        stored, its rows written, a `feedback.created` event and the opted-in developers' mails
        queued, all with the request's unit of work."""
        reporter = reporter_email(sender, submission)
        build = sender.build
        feedback = FeedbackRecord(
            id=new_id("fbk"),
            project_id=sender.project_id,
            application_id=sender.application.id,
            build_id=build.id,
            tester_id=sender.tester.id if sender.tester is not None else None,
            reporter_email=reporter,
            category=submission.category,
            text=submission.text,
            context=submission.context,
            status=FeedbackStatus.NEW,
            assignee_id=None,
            created_at=self.now,
            updated_at=self.now,
        )
        stored = []
        for position, shot in enumerate(screenshots, start=1):
            shot_id = new_id("fbs")
            key = screenshot_key(feedback.project_id, feedback.id, shot_id, shot.extension)
            stored.append(
                ScreenshotRecord(
                    id=shot_id,
                    feedback_id=feedback.id,
                    position=position,
                    storage_key=key,
                    content_type=shot.content_type,
                    width=shot.width,
                    height=shot.height,
                    bytes=shot.size,
                )
            )
        await self._store(stored, screenshots)
        # The build's row locked: it cannot be deleted (nor its screenshots' objects listed
        # for deletion) until this commits; gone meanwhile, nothing is kept.
        if not await lock_row(self.db, Build.id, build.id):
            raise not_in_application()
        await insert_rows(self.db, _FEEDBACK_TABLE, [_columns(feedback)])
        await insert_rows(self.db, _SCREENSHOTS_TABLE, [_columns(s) for s in stored])
        shown = ShownFeedback(feedback, stored, sender.tester)
        await webhook_events.feedback_created(
            self.db, build,
            lambda: feedback_schema(shown, lambda s: self.links.for_event(s.id, self.now)),
            self.public_url, self.now,
        )  # fmt: skip
        await self._mail(sender, shown)
        return shown

    async def _store(self, stored: list[ScreenshotRecord], screenshots: list[Reencoded]) -> None:
        """Each screenshot's object, before any row names it; all removed again unless the
        unit of work commits (those written, and any a failure cut off)."""
        keys = [s.storage_key for s in stored]

        async def remove() -> None:
            for key in keys:
                await self.storage.delete(key)

        unless_committed(self.db, remove)
        for record, shot in zip(stored, screenshots, strict=True):
            await self.storage.put(record.storage_key, shot.file, shot.size, shot.content_type)

    async def _mail(self, sender: Sender, shown: ShownFeedback) -> None:
        """A mail to each developer (or above) of the project who asked for one, but the one
        who sent it."""
        feedback = shown.feedback
        rows = await self.reads.all(_MAIL_TO, {"project_id": feedback.project_id})
        sent_by = sender.tester.id if sender.tester is not None else None
        to = [row["email"] for row in rows if row["id"] != sent_by]
        if not to:
            return
        names = await self.reads.first(_NAMES, {"app_id": feedback.application_id})
        assert names is not None  # the build's row is locked: its application is there
        told = _Told(
            names["project"],
            names["application"],
            version_label(sender.build.metadata_) or sender.build.file_name,
        )
        page = feedback_url(self.public_url, feedback.project_id, feedback.id)
        setting = f"{self.public_url}/api/projects/{feedback.project_id}/members/me/feedback-mail"
        await self.mail.send_all(
            self.db,
            lambda: [_mail(address, told, shown, page, setting) for address in to],
            self.now,
        )

    async def set_mail(self, access: ProjectAccess, enabled: bool) -> bool:
        """Whether the caller (a developer or above: checked by the caller's authorization)
        gets a mail for each feedback sent on the project's builds, from now on."""
        await self.db.execute(
            update(ProjectMember)
            .where(
                ProjectMember.project_id == access.project.id,
                ProjectMember.user_id == access.caller.user.id,
            )
            .values(feedback_mail=enabled)
        )
        return enabled


async def feedback_mail_of(reads: Reads, access: ProjectAccess) -> bool:
    """Whether the caller of `access` gets a mail for each feedback sent on its project."""
    params = {"project_id": access.project.id, "user_id": access.caller.user.id}
    return bool(await reads.scalar(_FEEDBACK_MAIL, params))


def reporter_email(sender: Sender, submission: Submission) -> str:
    """Whom to answer: the member's own address, or (with the update key) the one sent."""
    if sender.tester is not None:
        if submission.reporter_email is not None:
            raise ValidationFailed.for_field(
                REPORTER_EMAIL,
                "is only sent with the update key: a member's feedback is theirs, from their "
                "own address",
                code="reporter_email_not_taken",
            )
        return sender.tester.email
    if submission.reporter_email is None:
        raise ValidationFailed.for_field(
            REPORTER_EMAIL, "is required with the update key: whom to answer"
        )
    return submission.reporter_email


def _columns(record: FeedbackRecord | ScreenshotRecord) -> dict[str, Any]:
    return {f.name: getattr(record, f.name) for f in fields(record)}


def _mail(address: str, told: _Told, shown: ShownFeedback, page: str, setting: str) -> Mail:
    """The mail of a feedback: its text as a reply's mail quotes it (triage.py `mail_text`: no
    control or bidirectional control character, which would make it read otherwise than it
    is), and a reporter named only by an app's `reporterEmail` said to be unchecked (anyone
    holding the update key types any address there, a colleague's say)."""
    feedback = shown.feedback
    text = feedback.text
    cut = len(text) > MAIL_TEXT_SHOWN
    category = feedback.category.value
    return render(
        "feedback", address,
        f"{category.capitalize()} feedback on {told.application} {told.version}",
        reporter=feedback.reporter_email, checked=shown.tester is not None, category=category,
        application=told.application, version=told.version, project=told.project,
        screenshots=len(shown.screenshots),
        text=mail_text(text[:MAIL_TEXT_SHOWN]) + ("…" if cut else ""), cut=cut,
        shown=MAIL_TEXT_SHOWN, length=len(text), page=page, setting=setting,
    )  # fmt: skip

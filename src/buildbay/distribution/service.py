"""Distributing a build: to groups (their members, and whoever joins them later) and to
e-mails (members, or people invited into the project as testers).

Each person a build reaches has one row in `build_recipients` (per build and e-mail), written
with ON CONFLICT DO NOTHING: distributing again, or twice at once, reaches nobody twice and so
mails nobody twice. The request writes the rows (one INSERT ... SELECT per group, however large)
and one job; the job (`DISTRIBUTION_MAIL_JOB`) claims the rows still to be mailed, makes each
person's own install link and writes their mail to the outbox, all in its own unit of work.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import Boolean, DateTime, String, and_, literal, select, true, update
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.applications.models import Application
from buildbay.applications.reads import ApplicationRecord
from buildbay.auth.models import User
from buildbay.builds.models import Build, BuildStatus, InstallLink
from buildbay.builds.reads import BuildRecord
from buildbay.builds.schemas import version_label
from buildbay.db.reads import Reads
from buildbay.distribution.groups import check_group_ids, invite_tester
from buildbay.distribution.membership import insert_ignoring_duplicates, insert_of
from buildbay.distribution.models import EVERYONE, BuildGroup, BuildRecipient, GroupTester
from buildbay.errors import Conflict
from buildbay.ids import new_id
from buildbay.jobs.queue import enqueue
from buildbay.mail.message import notification
from buildbay.mail.outbox import MailOutbox
from buildbay.projects.authorization import ApplicationAccess, ProjectAccess
from buildbay.projects.models import Project, ProjectMember
from buildbay.text import normal_email_text

if TYPE_CHECKING:
    from buildbay.context import AppContext
    from buildbay.jobs.worker import Handler, JobRun

DISTRIBUTION_MAIL_JOB = "distribution_mail"


@dataclass(frozen=True, slots=True)
class DistributionResult:
    build_id: str
    groups: list[str]
    testers_reached: int
    notified: int


_GROUPS_OF_BUILD = select(BuildGroup.group_id).order_by(BuildGroup.group_id)


class Distributor:
    @classmethod
    def of(cls, ctx: AppContext, db: AsyncSession) -> Distributor:
        return cls(db, ctx.clock.now(), ctx.mail, ctx.settings.resolved_public_url)

    def __init__(self, db: AsyncSession, now: datetime, mail: MailOutbox, public_url: str) -> None:
        self.db = db
        self.now = now
        self.mail = mail
        self.public_url = public_url
        self.reads = Reads.within(db)

    async def distribute(
        self,
        access: ProjectAccess | ApplicationAccess,
        build: BuildRecord,
        group_ids: Sequence[str],
        emails: Sequence[str],
        notify: bool,
    ) -> DistributionResult:
        """What a developer asks: the build (ready) to these groups and e-mails."""
        if build.status is not BuildStatus.READY:
            raise Conflict(
                "Only a ready build can be distributed; verify the upload first",
                code="build_not_ready",
            )
        await check_group_ids(self.reads, access.project.id, group_ids)
        reached, notified = await reach_groups(
            self.db, self.now, build, group_ids, notify, access.caller.user.id
        )
        project_access = ProjectAccess(access.project, access.role, access.caller)
        more, more_notified = await self._to_emails(project_access, build, emails, notify)
        if notified or more_notified:
            enqueue(self.db, DISTRIBUTION_MAIL_JOB, {"buildId": build.id}, self.now)
        groups = await self.reads.all(_GROUPS_OF_BUILD.where(BuildGroup.build_id == build.id))
        return DistributionResult(
            build.id, [row["group_id"] for row in groups], reached + more, notified + more_notified
        )

    async def _to_emails(
        self, access: ProjectAccess, build: BuildRecord, emails: Sequence[str], notify: bool
    ) -> tuple[int, int]:
        wanted = list(dict.fromkeys(normal_email_text(e) for e in emails))
        if not wanted:
            return 0, 0
        members = {
            row.email: row
            for row in (
                await self.db.execute(
                    select(User.email, User.id, User.notify_new_builds)
                    .join(ProjectMember, ProjectMember.user_id == User.id)
                    .where(ProjectMember.project_id == access.project.id, User.email.in_(wanted))
                )
            ).all()
        }
        rows = []
        for email in wanted:
            member = members.get(email)
            if member is None:
                # Not a member: invited as tester, they see the build once they accept.
                await invite_tester(self.db, access, email, self.now, self.mail, self.public_url)
            rows.append(
                {
                    "build_id": build.id,
                    "email": email,
                    "user_id": member.id if member else None,
                    "reached_at": self.now,
                    "notify": bool(notify and member and member.notify_new_builds),
                }
            )
        statement = (
            insert_of(self.db, BuildRecipient)
            .values(rows)
            .on_conflict_do_nothing()  # type: ignore[attr-defined]
            .returning(BuildRecipient.notify)
        )
        flags = (await self.db.execute(statement)).scalars().all()
        return len(flags), sum(1 for flag in flags if flag)


async def reach_groups(
    db: AsyncSession,
    now: datetime,
    build: BuildRecord,
    group_ids: Sequence[str],
    notify: bool,
    sender: str | None,
) -> tuple[int, int]:
    """Reach the groups' members (one statement per group); how many were reached for the
    first time, and how many of them are to be mailed (not `sender`, nor anyone who turned
    new-build mails off)."""
    group_ids = list(dict.fromkeys(group_ids))
    await insert_ignoring_duplicates(
        db, BuildGroup, [{"build_id": build.id, "group_id": g} for g in group_ids]
    )
    reached = notified = 0
    for group_id in group_ids:
        wants_mail: Any = User.notify_new_builds if notify else literal(False, Boolean())
        if sender is not None and notify:
            wants_mail = and_(wants_mail, User.id != sender)
        members = (
            select(
                literal(build.id, String()),
                User.email,
                User.id,
                literal(now, DateTime(timezone=True)),
                wants_mail,
            )
            .join(ProjectMember, ProjectMember.user_id == User.id)
            .where(ProjectMember.project_id == build.project_id)
        )
        if group_id != EVERYONE:
            members = members.join(
                GroupTester,
                and_(GroupTester.user_id == User.id, GroupTester.group_id == group_id),
            )
        statement = (
            insert_of(db, BuildRecipient)
            .from_select(["build_id", "email", "user_id", "reached_at", "notify"], members)
            .on_conflict_do_nothing()  # type: ignore[attr-defined]
            .returning(BuildRecipient.notify)
        )
        flags = (await db.execute(statement)).scalars().all()
        reached += len(flags)
        notified += sum(1 for flag in flags if flag)
    return reached, notified


async def distribute_when_ready(
    db: AsyncSession, now: datetime, application: ApplicationRecord, build: BuildRecord
) -> None:
    """A build just became ready: distributed to its application's `autoDistributeGroups`,
    with mails (called by verify, in its unit of work)."""
    groups = await db.scalar(
        select(Application.auto_distribute_groups).where(Application.id == application.id)
    )
    if not groups:
        return
    _, notified = await reach_groups(db, now, build, groups, True, build.uploaded_by)
    if notified:
        enqueue(db, DISTRIBUTION_MAIL_JOB, {"buildId": build.id}, now)


# -- the job: each newly reached tester's link and mail ----------------------------------------


def distribution_mail_handler(ctx: AppContext) -> Handler:
    async def handle(run: JobRun) -> None:
        db, now = run.db, ctx.clock.now()
        row = (
            await db.execute(
                select(Build, Application.name, Application.install_link_days, Project.name)
                .join(Application, Application.id == Build.application_id)
                .join(Project, Project.id == Build.project_id)
                .where(Build.id == run.payload["buildId"])
            )
        ).first()
        if row is None:
            return  # deleted meanwhile: nobody to tell
        build, application, link_days, project = row
        # Claimed: of two jobs for one build (two distributions), each mails its own people.
        claimed = (
            await db.execute(
                update(BuildRecipient)
                .where(
                    BuildRecipient.build_id == build.id,
                    BuildRecipient.notify == true(),
                    BuildRecipient.notified_at.is_(None),
                )
                .values(notified_at=now)
                .returning(BuildRecipient.email, BuildRecipient.user_id)
                .execution_options(synchronize_session=False)
            )
        ).all()
        if not claimed:
            return
        expires_at = now + timedelta(days=link_days)
        links = {email: new_id("inl") for email, _ in claimed}
        await db.execute(
            insert_of(db, InstallLink),
            [
                {
                    "id": link_id,
                    "build_id": build.id,
                    "created_by": None,
                    "created_at": now,
                    "expires_at": expires_at,
                    "revoked_at": None,
                }
                for link_id in links.values()
            ],
        )
        await db.execute(
            update(BuildRecipient),
            [
                {"build_id": build.id, "email": email, "install_link_id": link_id}
                for email, link_id in links.items()
            ],
        )
        version = version_label(build.metadata_) or ""
        subject = f"{application} {version} is ready to test".replace("  ", " ")
        base = f"{ctx.settings.resolved_public_url}/install/"
        for email, user_id in claimed:
            mail = notification(
                "new_build",
                email,
                subject,
                ctx.unsubscribe.url(user_id or ""),  # set: only members are mailed
                application=application,
                version=version,
                project=project,
                notes=build.notes,
                link=base + ctx.install_tokens.token(links[email]),
            )
            ctx.mail.send(db, mail, now)

    return handle

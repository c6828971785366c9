"""Distributing a build: to groups (their members, and whoever joins them later) and to
e-mails (members, or people invited into the project as testers).

Each person a build reaches has one row in `build_recipients` (per build and e-mail), written
with ON CONFLICT DO NOTHING: distributing again, or twice at once, reaches nobody twice and so
mails nobody twice. The request records the groups (testers see the build through them from its
commit on), counts the people they newly reach, and writes one job (`DISTRIBUTION_JOB`). The job,
in its own unit of work, writes the groups' people as recipients (one INSERT ... SELECT however
many they are), claims the rows still to be mailed, makes each person's own install link and
writes their mail to the outbox. So the request's work does not grow with the group's size
(bench/mail.py measures it).

Whoever joins a group later becomes a recipient of its ready builds then, unmailed
(membership.py). A member named by e-mail is written at once, even one in a group the build
goes to: the row is theirs whichever comes first, the group's job leaving it as it is and
mailing them once. The answer counts each person once: one in such a group was counted by the
request that distributed the build to the group (this one, or one whose job is pending), so
the e-mail does not count them again. Named by e-mail with `notify`, someone reached before
without a mail (they joined a group later, or the distribution did not notify) is mailed now,
once: counted in `notified`, not as newly reached.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, cast

from sqlalchemy import (
    Boolean,
    ColumnElement,
    DateTime,
    String,
    Table,
    and_,
    bindparam,
    case,
    exists,
    func,
    literal,
    or_,
    select,
    true,
    update,
)
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.applications.models import Application
from buildbay.applications.records import ApplicationRecord
from buildbay.auth.models import User
from buildbay.builds.enums import BuildStatus
from buildbay.builds.install import InstallTokens
from buildbay.builds.models import Build, InstallLink
from buildbay.builds.records import BuildRecord
from buildbay.builds.schemas import version_label
from buildbay.builds.source import BuildSource, source_sentence
from buildbay.channels.service import ChannelService
from buildbay.clock import Clock
from buildbay.console_urls import application_url
from buildbay.db.engine import insert_rows
from buildbay.db.reads import Reads
from buildbay.devices.gained import devices_gained
from buildbay.devices.words import noun
from buildbay.distribution.groups import check_group_ids
from buildbay.distribution.membership import (
    DISTRIBUTION_JOB,
    insert_ignoring_duplicates,
    insert_of,
)
from buildbay.distribution.models import (
    EVERYONE,
    BuildDistribution,
    BuildGroup,
    BuildRecipient,
    DistributionKind,
    GroupTester,
    InvitationGroup,
)
from buildbay.errors import Conflict
from buildbay.ids import new_id
from buildbay.invitations.caps import Admission, blocked_addresses
from buildbay.invitations.models import Invitation
from buildbay.invitations.service import InvitationService, TestersInvited
from buildbay.jobs.queue import enqueue
from buildbay.mail.message import Mail, notification
from buildbay.mail.outbox import MailOutbox
from buildbay.mail.unsubscribe import UnsubscribeLinks
from buildbay.projects.authorization import (
    ApplicationAccess,
    ProjectAccess,
    may_invite,
    require_invite_rights,
)
from buildbay.projects.models import Project, ProjectMember
from buildbay.text import normal_email_text, without_bidi_controls
from buildbay.webhooks import events as webhook_events

if TYPE_CHECKING:
    from buildbay.jobs.worker import Handler, JobRun

log = logging.getLogger("buildbay.distribution")

# Testers whose install links one UPDATE sets (3 parameters each: within both databases'
# limits).
LINKS_PER_STATEMENT = 1000
# Why a recipient whose address blocked mail from this server was not mailed (the installs list).
BLOCKED_ADDRESS = "this address asked for no mail from Buildbay"
_INSTALL_LINKS = cast("Table", InstallLink.__table__)


@dataclass(frozen=True, slots=True)
class DistributionResult:
    build_id: str
    groups: list[str]
    testers_reached: int  # members newly reached, the build's uploader never among them
    notified: int
    invited: list[str] = field(default_factory=list)  # e-mails invited (pending, or mailed now)
    admission: Admission = field(default_factory=Admission)  # those refused were not reached
    # People newly given the build who have not joined the project yet: it is theirs when they
    # accept their invitation (named by e-mail, or invited into a group it went to).
    invitations_pending: int = 0
    # Of the testers reached, those not mailed because they turned new-build mails off (only
    # when the distribution mails).
    unsubscribed: int = 0

    def summary(self) -> dict[str, object]:
        """What was done, as a 429's problem body tells it (`distribution`)."""
        return {"buildId": self.build_id, "groups": self.groups,
                "testersReached": self.testers_reached, "notified": self.notified,
                "invitationsPending": self.invitations_pending,
                "unsubscribed": self.unsubscribed}  # fmt: skip

    def sentence(self) -> str:
        """The result in words: "2 testers reached, 1 invitation pending, 1 unsubscribed from
        mail" (what is zero is left out, but the testers reached)."""
        parts = [plural(self.testers_reached, "tester") + " reached"]
        if self.invitations_pending:
            parts.append(plural(self.invitations_pending, "invitation") + " pending")
        if self.unsubscribed:
            parts.append(f"{self.unsubscribed} unsubscribed from mail")
        return ", ".join(parts)


def plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


@dataclass(frozen=True, slots=True)
class Reach:
    """What distributing to groups did: the groups new to the build, the members it newly
    reached (not the uploader), how many of them are to be mailed and how many turned mail off,
    and the invited addresses of those groups that have not joined yet (`pending`)."""

    new_groups: list[str] = field(default_factory=list)
    reached: int = 0
    notified: int = 0
    unsubscribed: int = 0
    pending: list[str] = field(default_factory=list)


_GROUPS_OF_BUILD = select(BuildGroup.group_id).order_by(BuildGroup.group_id)
_EVERYONE_OF_BUILD = select(BuildGroup.group_id).where(
    BuildGroup.build_id == bindparam("build_id"), BuildGroup.group_id == EVERYONE
)


class Distributor:
    def __init__(
        self, db: AsyncSession, now: datetime, public_url: str, invitations: InvitationService
    ) -> None:
        self.db = db
        self.now = now
        self.public_url = public_url
        self.invitations = invitations
        self.reads = Reads.within(db)

    async def check_may_invite(
        self, access: ProjectAccess | ApplicationAccess, emails: Sequence[str]
    ) -> None:
        """403 unless the caller may invite, if `emails` name someone not a member: naming them
        invites them into the project, which an API token may do only with the rights that
        the invitation endpoints need (projects/authorization.py)."""
        if not emails or may_invite(access.caller):
            return
        wanted = list(dict.fromkeys(normal_email_text(e) for e in emails))
        members = set(
            (
                await self.db.scalars(
                    select(User.email)
                    .join(ProjectMember, ProjectMember.user_id == User.id)
                    .where(ProjectMember.project_id == access.project.id, User.email.in_(wanted))
                )
            ).all()
        )
        if any(email not in members for email in wanted):
            require_invite_rights(access.caller, "naming an e-mail that is not a member's")

    async def distribute(
        self,
        access: ProjectAccess | ApplicationAccess,
        build: BuildRecord,
        group_ids: Sequence[str],
        emails: Sequence[str],
        notify: bool,
        *,
        publish: bool = True,
    ) -> DistributionResult:
        """What a developer asks: the build (ready) to these groups and e-mails. Reaching
        `everyone` for the first time, a build on no release channel joins `default` (unless
        not `publish`: a verify that named its channels)."""
        if build.status is not BuildStatus.READY:
            raise Conflict(
                "Only a ready build can be distributed; verify the upload first",
                code="build_not_ready",
            )
        await self.check_may_invite(access, emails)
        await check_group_ids(self.reads, access.project.id, group_ids)
        if publish and EVERYONE in group_ids and not await self._reached_everyone(build.id):
            channels = ChannelService(self.db, self.now)
            await channels.publish_reaching_everyone(build.application_id, build.id)
        sender = access.caller.user.id
        reach = await reach_groups(self.db, self.now, build, group_ids, notify, sender)
        project_access = ProjectAccess(access.project, access.role, access.caller)
        by_mail = await self._to_emails(project_access, build, emails, notify)
        groups = await self.reads.all(_GROUPS_OF_BUILD.where(BuildGroup.build_id == build.id))
        invited = by_mail.invited
        pending = set(reach.pending) | set(by_mail.pending)
        result = DistributionResult(
            build.id, [row["group_id"] for row in groups], reach.reached + by_mail.reached,
            reach.notified + by_mail.notified, list(invited.invitations) if invited else [],
            invited.admission if invited else Admission(), len(pending),
            reach.unsubscribed + by_mail.unsubscribed,
        )  # fmt: skip
        await record_distribution(
            self.db, self.now, build.id, sender, reach.new_groups, by_mail.named
        )
        await webhook_events.build_distributed(
            self.db, build, self.public_url, self.now, groups=result.groups,
            testersReached=result.testers_reached, notified=result.notified,
            invitationsPending=result.invitations_pending, unsubscribed=result.unsubscribed,
        )  # fmt: skip
        return result

    async def _reached_everyone(self, build_id: str) -> bool:
        found = await self.reads.scalar(_EVERYONE_OF_BUILD, {"build_id": build_id})
        return found is not None

    async def _to_emails(
        self, access: ProjectAccess, build: BuildRecord, emails: Sequence[str], notify: bool
    ) -> ByMail:
        """The e-mails as recipients: members (mailed, if `notify` and they take new-build
        mails), and others invited into the project as far as the invitation caps let (one
        refused is not a recipient). How many members this call newly reaches (the uploader
        is not counted), how many it has mailed and how many turned mail off, that no group
        counted; the invited addresses it newly gives the build; and the invitations."""
        wanted = list(dict.fromkeys(normal_email_text(e) for e in emails))
        if not wanted:
            return ByMail()
        # In a group the build is distributed to (in this call too): counted by the request
        # that distributed it to the group, and written by that group's job unless this
        # call writes them first (the job then leaves their row as it is, and mails them).
        through_group = or_(
            exists().where(BuildGroup.build_id == build.id, BuildGroup.group_id == EVERYONE),
            exists().where(
                BuildGroup.build_id == build.id,
                GroupTester.group_id == BuildGroup.group_id,
                GroupTester.user_id == User.id,
            ),
        )
        reached_before = exists().where(
            BuildRecipient.build_id == build.id, BuildRecipient.email == User.email
        )
        members = {
            row.email: row
            for row in (
                await self.db.execute(
                    select(
                        User.email,
                        User.id,
                        User.notify_new_builds,
                        through_group.label("through_group"),
                        reached_before.label("reached_before"),
                    )
                    .join(ProjectMember, ProjectMember.user_id == User.id)
                    .where(ProjectMember.project_id == access.project.id, User.email.in_(wanted))
                )
            ).all()
        }
        # Not members: invited as testers, they see the build once they accept.
        others = [email for email in wanted if email not in members]
        invited = await self.invitations.invite_testers(access, others) if others else None
        rows = []
        for email in wanted:
            member = members.get(email)
            if member is None and (invited is None or email not in invited.invitations):
                continue  # not invited (refused): not reached
            rows.append(
                {
                    "build_id": build.id,
                    "email": email,
                    "user_id": member.id if member else None,
                    "reached_at": self.now,
                    "notify": bool(notify and member and member.notify_new_builds),
                    "direct": True,
                }
            )
        if not rows:
            return ByMail(invited=invited)
        statement = insert_of(self.db, BuildRecipient).values(rows)
        # Reached before unmailed (they joined a group later, or a distribution did not
        # notify): to be mailed now. Whoever was mailed, or is about to be, is left alone.
        statement = statement.on_conflict_do_update(  # type: ignore[attr-defined]
            index_elements=[BuildRecipient.build_id, BuildRecipient.email],
            set_={"notify": true()},
            where=and_(
                statement.excluded.notify.is_(True),  # type: ignore[attr-defined]
                BuildRecipient.notify.is_(False),
                BuildRecipient.notified_at.is_(None),
            ),
        )
        written = (
            await self.db.execute(statement.returning(BuildRecipient.email, BuildRecipient.notify))
        ).all()
        # Named: theirs whatever groups they leave, a row a group wrote before included.
        await self.db.execute(
            update(BuildRecipient)
            .where(
                BuildRecipient.build_id == build.id,
                BuildRecipient.email.in_(wanted),
                BuildRecipient.direct.is_(False),
            )
            .values(direct=True)
            .execution_options(synchronize_session=False)
        )
        if any(to_mail for _, to_mail in written):
            enqueue(self.db, DISTRIBUTION_JOB, {"buildId": build.id}, self.now)
        answer = ByMail(invited=invited, named=[str(row["email"]) for row in rows])
        for email, to_mail in written:
            member = members.get(email)
            if member is None:
                answer.pending.append(email)  # a row of its own: an invitee's is never updated
            elif member.reached_before:
                answer.notified += 1  # updated: to be mailed now, reached already
            elif not member.through_group and member.id != build.uploaded_by:
                answer.reached += 1
                answer.notified += to_mail
                answer.unsubscribed += bool(notify and not member.notify_new_builds)
        return answer


@dataclass(slots=True)
class ByMail:
    """What naming e-mails did (`Distributor._to_emails`)."""

    reached: int = 0
    notified: int = 0
    unsubscribed: int = 0
    pending: list[str] = field(default_factory=list)  # invited addresses newly given the build
    named: list[str] = field(default_factory=list)  # the addresses that are now recipients
    invited: TestersInvited | None = None


async def reach_groups(
    db: AsyncSession,
    now: datetime,
    build: BuildRecord,
    group_ids: Sequence[str],
    notify: bool,
    sender: str | None,
) -> Reach:
    """Distribute the build to the groups: recorded at once (their testers see it from this
    commit on), their people written as recipients and mailed by the job. How many members the
    new groups reach for the first time (not the build's uploader: not a tester of it), how
    many of them are to be mailed (not `sender`, nor anyone who turned new-build mails off) and
    how many turned mail off; and who was invited into them and has not joined yet."""
    prior = set(
        (await db.execute(select(BuildGroup.group_id).where(BuildGroup.build_id == build.id)))
        .scalars()
        .all()
    )
    new = [g for g in dict.fromkeys(group_ids) if g not in prior]
    if not new:
        return Reach()
    await insert_ignoring_duplicates(
        db, BuildGroup, [{"build_id": build.id, "group_id": g} for g in new]
    )
    # Counted, not written: writing a row per tester is the job's, so that a group of 1,000
    # costs the request about what a group of one does.
    covered: ColumnElement[bool] = exists().where(
        BuildRecipient.build_id == build.id, BuildRecipient.email == User.email
    )
    if prior:
        covered = or_(covered, _in_groups(prior))
    tester: ColumnElement[bool] = (
        User.id != build.uploaded_by if build.uploaded_by is not None else true()
    )
    unsubscribed = and_(tester, User.notify_new_builds.is_(False), literal(notify, Boolean()))
    counted = (
        await db.execute(
            select(
                func.count(case((tester, 1))),
                func.count(case((_wants_mail(notify, sender), 1))),
                func.count(case((unsubscribed, 1))),
            )
            .select_from(User)
            .join(ProjectMember, ProjectMember.user_id == User.id)
            .where(ProjectMember.project_id == build.project_id, _in_groups(new), ~covered)
        )
    ).one()
    enqueue(
        db,
        DISTRIBUTION_JOB,
        {"buildId": build.id, "groups": new, "notify": notify, "sender": sender},
        now,
    )
    pending = await invited_into_groups(db, now, build, new, prior)
    return Reach(new, int(counted[0]), int(counted[1]), int(counted[2]), pending)


async def invited_into_groups(
    db: AsyncSession, now: datetime, build: BuildRecord, new: Sequence[str], prior: Collection[str]
) -> list[str]:
    """The addresses whose pending invitation into the project is for one of the `new` groups
    (any, for `everyone`), not for one of the `prior` ones, and that the build was not given
    by name: they have it when they join. (Pending invitations are few: the caps bound them.)"""
    if EVERYONE in prior:
        return []

    def for_groups(groups: Collection[str]) -> ColumnElement[bool]:
        if EVERYONE in groups:
            return true()
        return exists().where(
            InvitationGroup.invitation_id == Invitation.id,
            InvitationGroup.group_id.in_(list(groups)),
        )

    found = await db.scalars(
        select(Invitation.email)
        .distinct()
        .where(
            Invitation.project_id == build.project_id,
            Invitation.accepted_at.is_(None),
            Invitation.revoked_at.is_(None),
            Invitation.declined_at.is_(None),
            Invitation.expires_at > now,
            for_groups(new),
            ~for_groups(prior) if prior else true(),
            ~exists().where(
                BuildRecipient.build_id == build.id, BuildRecipient.email == Invitation.email
            ),
        )
        .order_by(Invitation.email)
    )
    return list(found)


async def record_distribution(
    db: AsyncSession, now: datetime, build_id: str, by: str | None,
    groups: Sequence[str], emails: Sequence[str],
) -> None:  # fmt: skip
    """Who distributed the build to these groups and people, and when (the first time)."""
    rows = [
        {
            "build_id": build_id,
            "kind": kind,
            "target": target,
            "distributed_by": by,
            "distributed_at": now,
        }
        for kind, targets in ((DistributionKind.GROUP, groups), (DistributionKind.PERSON, emails))
        for target in targets
    ]
    await insert_ignoring_duplicates(db, BuildDistribution, rows)


def _in_groups(group_ids: Collection[str]) -> ColumnElement[bool]:
    """True for a user (a row of `users` in the query, a member) in one of the groups."""
    if EVERYONE in group_ids:
        return true()
    return exists().where(GroupTester.user_id == User.id, GroupTester.group_id.in_(list(group_ids)))


def _wants_mail(notify: bool, sender: str | None) -> ColumnElement[bool]:
    if not notify:
        return literal(False, Boolean())
    wants: ColumnElement[bool] = User.notify_new_builds.is_(True)
    return and_(wants, User.id != sender) if sender is not None else wants


async def _write_recipients(
    db: AsyncSession,
    now: datetime,
    build_id: str,
    project_id: str,
    group_ids: Sequence[str],
    notify: bool,
    sender: str | None,
) -> None:
    """The groups' people as the build's recipients (those it reached already are left as they
    are): one INSERT ... SELECT, however many they are."""
    members = (
        select(
            literal(build_id, String()),
            User.email,
            User.id,
            literal(now, DateTime(timezone=True)),
            _wants_mail(notify, sender),
        )
        .join(ProjectMember, ProjectMember.user_id == User.id)
        .where(ProjectMember.project_id == project_id, _in_groups(group_ids))
    )
    statement = insert_of(db, BuildRecipient).from_select(
        ["build_id", "email", "user_id", "reached_at", "notify"], members
    )
    await db.execute(statement.on_conflict_do_nothing())  # type: ignore[attr-defined]


async def distribute_when_ready(
    db: AsyncSession, now: datetime, application: ApplicationRecord, build: BuildRecord
) -> None:
    """A build just became ready: distributed to its application's `autoDistributeGroups`,
    with mails (called by verify, in its unit of work)."""
    if application.auto_distribute_groups:
        reach = await reach_groups(
            db, now, build, application.auto_distribute_groups, True, build.uploaded_by
        )
        await record_distribution(db, now, build.id, build.uploaded_by, reach.new_groups, [])


# -- the job: each newly reached tester's link and mail ----------------------------------------


def distribution_mail_handler(
    clock: Clock,
    public_url: str,
    install_tokens: InstallTokens,
    unsubscribe: UnsubscribeLinks,
    outbox: MailOutbox,
) -> Handler:
    async def handle(run: JobRun) -> None:
        db, now = run.db, clock.now()
        row = (
            await db.execute(
                select(
                    Build,
                    Application.name,
                    Application.install_link_days,
                    Project.name,
                    User.name.label("uploader"),
                )
                .join(Application, Application.id == Build.application_id)
                .join(Project, Project.id == Build.project_id)
                .outerjoin(User, User.id == Build.uploaded_by)
                .where(Build.id == run.payload["buildId"])
            )
        ).first()
        if row is None:
            return  # deleted meanwhile: nobody to tell
        build, application, link_days, project, uploader = row
        payload = run.payload
        if payload.get("groups"):
            await _write_recipients(db, now, build.id, build.project_id, payload["groups"],
                                    payload["notify"], payload["sender"])  # fmt: skip
        # Claimed: of two jobs for one build (two distributions), each mails its own people.
        claimed = (
            await db.execute(
                update(BuildRecipient)
                .where(
                    BuildRecipient.build_id == build.id,
                    BuildRecipient.notify == true(),
                    BuildRecipient.notified_at.is_(None),
                    BuildRecipient.mail_error.is_(None),
                )
                .values(notified_at=now)
                .returning(BuildRecipient.email, BuildRecipient.user_id)
                .execution_options(synchronize_session=False)
            )
        ).all()
        # A block from the unsubscribe page means no unsolicited mail from this server at all,
        # whatever made the address a member (an admin may add an account without asking it):
        # recorded as not mailed, and why, like an address mail cannot reach.
        blocked = await blocked_addresses(db, [email for email, _ in claimed])
        if blocked:
            await db.execute(
                update(BuildRecipient)
                .where(BuildRecipient.build_id == build.id, BuildRecipient.email.in_(blocked))
                .values(notified_at=None, mail_error=BLOCKED_ADDRESS)
                .execution_options(synchronize_session=False)
            )
            claimed = [row for row in claimed if row[0] not in blocked]
        if not claimed:
            return
        expires_at = now + timedelta(days=link_days)
        owned = [(email, new_id("inl"), user_id) for email, user_id in claimed]
        links = [(email, link_id) for email, link_id, _ in owned]
        owner_of = {link_id: user_id for _, link_id, user_id in owned}
        # Each tester's own install link: two statements per chunk of testers, not two per
        # tester (a group of 1,000 is one chunk).
        for start in range(0, len(links), LINKS_PER_STATEMENT):
            chunk = dict(links[start : start + LINKS_PER_STATEMENT])
            new_links = [
                {
                    "id": link_id,
                    "build_id": build.id,
                    "owner_id": owner_of[link_id],
                    "created_at": now,
                    "expires_at": expires_at,
                }
                for link_id in chunk.values()
            ]
            await insert_rows(db, _INSTALL_LINKS, new_links)
            await db.execute(
                update(BuildRecipient)
                .where(BuildRecipient.build_id == build.id, BuildRecipient.email.in_(chunk))
                .values(install_link_id=case(chunk, value=BuildRecipient.email))
                .execution_options(synchronize_session=False)
            )
        version = version_label(build.metadata_) or ""
        subject = f"{application} {version} is ready to test".replace("  ", " ")
        base = f"{public_url}/install/"
        link_of = dict(links)
        gained = await devices_gained(Reads.within(db), build.application_id, build.id)
        # Where it came from, in words (its branch shown as it is, but for bidi controls).
        source = source_sentence(
            BuildSource.of_columns(
                build.source_commit, build.source_branch, build.source_tag,
                build.source_repository, build.source_ci_run_url, build.source_pull_request,
            )
        )  # fmt: skip

        def mails() -> list[Mail]:
            return [
                notification(
                    "new_build",
                    email,
                    subject,
                    unsubscribe.url(user_id or "", email),  # set: only members are mailed
                    application=application,
                    version=version,
                    project=project,
                    notes=build.notes,
                    source=without_bidi_controls(source) if source else None,
                    link=base + install_tokens.token(link_of[email]),
                    # Testers see people's names, never their addresses; and the application's
                    # page, where the builds given to them are (a build's page is developers').
                    uploader=uploader,
                    page=application_url(public_url, build.project_id, build.application_id),
                    now_installs_on=[
                        f"your {noun(d)} ({without_bidi_controls(d.name)})"
                        for d in gained.get(user_id or "", [])
                    ],
                )
                for email, user_id in claimed
            ]

        refused = await outbox.send_all(db, mails, now)
        if refused:
            await _record_refused(db, build.id, refused)

    return handle


async def _record_refused(db: AsyncSession, build_id: str, refused: dict[str, str]) -> None:
    """The recipients whose address mail cannot reach (stored before today's rules): not
    mailed, and why, for each alone (the build's installs list says so); the others' mails
    stand. Not claimed again by a later distribution of the build."""
    for email, reason in refused.items():
        await db.execute(
            update(BuildRecipient)
            .where(BuildRecipient.build_id == build_id, BuildRecipient.email == email)
            .values(notified_at=None, mail_error=reason[:500])
            .execution_options(synchronize_session=False)
        )
        log.warning("the new-build mail of build %s to %r is not sent: %s", build_id, email,
                    reason)  # fmt: skip

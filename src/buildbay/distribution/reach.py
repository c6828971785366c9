"""A build's reach, as its page and its installs report tell it: to which groups and people it
was distributed, by whom and when; who has it (the testers reached, never its uploader: they
did not test it by uploading it), who will have it when they join (invited, not signed up
yet), and who turned new-build mails off.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import String, bindparam, exists, func, or_, select

from buildbay.auth.models import User
from buildbay.builds.records import BuildRecord
from buildbay.db.reads import Reads
from buildbay.distribution.models import (
    EVERYONE,
    BuildDistribution,
    BuildGroup,
    BuildRecipient,
    DistributionKind,
    InvitationGroup,
    TesterGroup,
)
from buildbay.invitations.models import Invitation


@dataclass(frozen=True, slots=True)
class Distributed:
    """A group or a person the build was distributed to."""

    kind: DistributionKind
    target: str  # a group's id, or an e-mail
    name: str  # the group's name, or the person's (their e-mail when they have no account)
    by: str | None  # who did it, by name; None: not known (before this was kept) or deleted
    at: datetime | None  # None: not known (distributed before this was kept)
    exists: bool = True  # False: a group deleted since


@dataclass(frozen=True, slots=True)
class BuildReach:
    distributed: list[Distributed]
    testers_reached: int  # members it reached, its uploader left out
    invited: list[str]  # e-mails invited that will have it when they join
    unsubscribed: int  # of the testers reached, those who turned new-build mails off


_VALID = (
    Invitation.accepted_at.is_(None),
    Invitation.revoked_at.is_(None),
    Invitation.declined_at.is_(None),
    Invitation.expires_at > bindparam("now"),
)
_GROUPS = (
    select(
        BuildGroup.group_id.label("target"),
        TesterGroup.name,
        BuildDistribution.distributed_at,
        User.name.label("by"),
    )
    .select_from(BuildGroup)
    .outerjoin(TesterGroup, TesterGroup.id == BuildGroup.group_id)
    .outerjoin(
        BuildDistribution,
        (BuildDistribution.build_id == BuildGroup.build_id)
        & (BuildDistribution.kind == DistributionKind.GROUP)
        & (BuildDistribution.target == BuildGroup.group_id),
    )
    .outerjoin(User, User.id == BuildDistribution.distributed_by)
    .where(BuildGroup.build_id == bindparam("build_id"))
)
# Groups distributed to and deleted since: their row says so.
_GONE_GROUPS = (
    select(BuildDistribution.target, BuildDistribution.distributed_at, User.name.label("by"))
    .outerjoin(User, User.id == BuildDistribution.distributed_by)
    .where(
        BuildDistribution.build_id == bindparam("build_id"),
        BuildDistribution.kind == DistributionKind.GROUP,
        ~exists().where(
            BuildGroup.build_id == BuildDistribution.build_id,
            BuildGroup.group_id == BuildDistribution.target,
        ),
    )
)
_recipient = User.__table__.alias("recipient")
_PEOPLE = (
    select(
        BuildRecipient.email.label("target"),
        _recipient.c.name,
        BuildDistribution.distributed_at,
        User.name.label("by"),
    )
    .select_from(BuildRecipient)
    .outerjoin(_recipient, _recipient.c.id == BuildRecipient.user_id)
    .outerjoin(
        BuildDistribution,
        (BuildDistribution.build_id == BuildRecipient.build_id)
        & (BuildDistribution.kind == DistributionKind.PERSON)
        & (BuildDistribution.target == BuildRecipient.email),
    )
    .outerjoin(User, User.id == BuildDistribution.distributed_by)
    .where(BuildRecipient.build_id == bindparam("build_id"), BuildRecipient.direct.is_(True))
    .order_by(BuildRecipient.email)
)
_TESTERS = (
    select(
        func.count().label("reached"),
        func.count().filter(User.notify_new_builds.is_(False)).label("unsubscribed"),
    )
    .select_from(BuildRecipient)
    .join(User, User.id == BuildRecipient.user_id)
    .where(
        BuildRecipient.build_id == bindparam("build_id"),
        or_(
            bindparam("uploader", type_=String()).is_(None),
            User.id != bindparam("uploader", type_=String()),
        ),
    )
)
# Invited, not signed up yet: named by e-mail (a row without an account), or invited into a
# group the build went to (into the project, when it went to everyone).
_INVITED_BY_NAME = select(BuildRecipient.email).where(
    BuildRecipient.build_id == bindparam("build_id"), BuildRecipient.user_id.is_(None)
)
_INVITED_TO_GROUPS = select(Invitation.email).where(
    Invitation.project_id == bindparam("project_id"),
    *_VALID,
    or_(
        exists().where(
            BuildGroup.build_id == bindparam("build_id"), BuildGroup.group_id == EVERYONE
        ),
        exists().where(
            InvitationGroup.invitation_id == Invitation.id,
            BuildGroup.build_id == bindparam("build_id"),
            BuildGroup.group_id == InvitationGroup.group_id,
        ),
    ),
)
_PENDING_OF = select(Invitation.email).where(
    Invitation.project_id == bindparam("project_id"),
    Invitation.email.in_(bindparam("emails", expanding=True)),
    *_VALID,
)


async def reach_of(reads: Reads, build: BuildRecord, now: datetime) -> BuildReach:
    params = {"build_id": build.id, "project_id": build.project_id, "now": now,
              "uploader": build.uploaded_by}  # fmt: skip
    distributed = [
        Distributed(
            DistributionKind.GROUP,
            row["target"],
            EVERYONE if row["target"] == EVERYONE else row["name"] or row["target"],
            row["by"],
            row["distributed_at"],
        )
        for row in await reads.all(_GROUPS, params)
    ]
    distributed += [
        Distributed(
            DistributionKind.GROUP,
            row["target"],
            row["target"],
            row["by"],
            row["distributed_at"],
            exists=False,
        )
        for row in await reads.all(_GONE_GROUPS, params)
    ]
    distributed.sort(key=lambda d: (d.target != EVERYONE, d.name.casefold()))
    distributed += [
        Distributed(
            DistributionKind.PERSON,
            row["target"],
            row["name"] or row["target"],
            row["by"],
            row["distributed_at"],
        )
        for row in await reads.all(_PEOPLE, params)
    ]
    counted = await reads.first(_TESTERS, params)
    by_name = [row["email"] for row in await reads.all(_INVITED_BY_NAME, params)]
    # Named while invited: still pending (one whose invitation lapsed will not join by it).
    pending = (
        {row["email"] for row in await reads.all(_PENDING_OF, params | {"emails": by_name})}
        if by_name
        else set()
    )
    pending |= {row["email"] for row in await reads.all(_INVITED_TO_GROUPS, params)}
    return BuildReach(
        distributed,
        int(counted["reached"]) if counted else 0,
        sorted(pending),
        int(counted["unsubscribed"]) if counted else 0,
    )

"""How many invitation mails may leave, and to whom: the caps a day, and the addresses that
want none.

Every path that mails an invitation (an invite or a resend, testers added to a group by e-mail,
a distribution's e-mails, a verify's distribution) asks `InvitationCaps.admit` first, in the
request's unit of work, for the addresses it is about to mail. Three counters a UTC day bound
it (BUILDBAY_INVITATIONS_PER_*, per plan):

- per recipient address, whatever project or account invites it, resends included: nobody is
  mailed more than a few invitations a day, however many accounts ask;
- per inviting account (its plan): a new free account reaches about a hundred addresses a day;
  an account that has not verified its own e-mail address, a handful
  (INVITATIONS_PER_ACCOUNT_PER_DAY_UNVERIFIED), whatever its plan: throwaway accounts signed
  up with made-up addresses must not each reach a plan's hundred strangers;
- per project (the plan of its best-paid owner).

The counters are rows of `invitation_counts` in the database, written in the same transaction
as the invitations and their mails: shared by every server process, as durable as the mails
they count, and taken back with them if the request fails. They are locked in one order (the
account's, the project's, then the recipients' by key), so two requests never wait on each
other in a circle. An address blocked from the unsubscribe page is refused before any counter.

Adding an account whose address is not verified as a member (projects/service.py) is an
invitation in all but name, and is counted and refused here the same way; adding a verified
account is not (its owner chose to be reachable by mail here).

A public join link's confirmation mails are not invitations and are not counted here: they
spend a budget of their own, per link and per address (distribution/join_links.py), so that
whoever holds a public link cannot spend the team's caps.

New-build mails are not counted: they go only to members of the project (people who accepted
an invitation or were added by their account), at most one per build, and each carries its
one-click unsubscribe link; none goes to a blocked address (distribution/service.py): a block
means no unsolicited mail from this server at all.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from sqlalchemy import case, delete, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.auth.models import User
from buildbay.config import InvitationCaps as Caps
from buildbay.config import Plan
from buildbay.db.concurrency import insert_unless_present
from buildbay.errors import Conflict, RateLimited
from buildbay.invitations.counts import address_hash, day_of, seconds_to_next_day
from buildbay.invitations.models import InvitationBlock, InvitationCount
from buildbay.projects.authorization import ProjectAccess
from buildbay.projects.enums import ProjectRole
from buildbay.projects.models import ProjectMember

# The caps of an account of a plan inviting into a project of a plan (Settings.invitations_per_day).
CapsOf = Callable[[Plan, Plan], Caps]
_PLAN_RANK = {Plan.FREE: 0, Plan.PRO: 1, Plan.ENTERPRISE: 2}


class Refusal(StrEnum):
    """Why an address was not sent an invitation."""

    BLOCKED = "blocked"  # its owner asked for no invitations from this server
    RECIPIENT_LIMIT = "recipient_limit"  # it had as many invitations today as it takes
    ACCOUNT_LIMIT = "account_limit"  # the inviting account sent as many as its plan allows
    # the inviting account, its address unverified, sent as many as such an account may
    UNVERIFIED_LIMIT = "unverified_account_limit"
    PROJECT_LIMIT = "project_limit"  # the project sent as many as its plan allows


REASONS = {
    Refusal.BLOCKED: "this address does not accept invitations from Buildbay",
    Refusal.RECIPIENT_LIMIT: "this address has had as many invitations as it takes in a day",
    Refusal.ACCOUNT_LIMIT: "your account has sent as many invitations as its plan allows today",
    Refusal.PROJECT_LIMIT: "the project has sent as many invitations as its plan allows today",
    Refusal.UNVERIFIED_LIMIT: (
        "your account has sent as many invitations as an account with an unverified e-mail "
        "address may today; verify your address (the link in the mail sent at sign-up) to raise "
        "the cap to your plan's"
    ),
}


@dataclass(frozen=True, slots=True)
class NotInvited:
    email: str
    reason: Refusal

    @property
    def message(self) -> str:
        return REASONS[self.reason]


@dataclass(slots=True)
class Admission:
    """Of the addresses asked for, those that may be mailed now (in the order asked) and those
    that may not; `retry_after`: seconds until the day's counters start again."""

    admitted: list[str] = field(default_factory=list)
    refused: list[NotInvited] = field(default_factory=list)
    retry_after: int = 0

    @property
    def capped(self) -> bool:
        """A cap, not a block, refused someone: the caller may try them again tomorrow."""
        return any(r.reason is not Refusal.BLOCKED for r in self.refused)


def _recipient_key(email: str) -> str:
    return f"recipient:{address_hash(email)}"


class InvitationCaps:
    def __init__(self, db: AsyncSession, now: datetime, caps: CapsOf) -> None:
        self.db = db
        self.now = now
        self.caps_of = caps
        self.day = day_of(now)

    async def admit(self, access: ProjectAccess, emails: Sequence[str]) -> Admission:
        """Count the invitation mails to `emails` (normalised, each once) that may leave now;
        the rest are refused, with why. The counters of those admitted are spent."""
        admission = Admission(retry_after=self._seconds_to_next_day())
        blocked = await self.blocked(emails)
        candidates = [e for e in emails if e not in blocked]
        admission.refused += [NotInvited(e, Refusal.BLOCKED) for e in emails if e in blocked]
        if not candidates:
            return admission
        caps = self.caps_of(access.caller.user.plan, await self._project_plan(access))
        per_account, account_refusal = caps.per_account, Refusal.ACCOUNT_LIMIT
        lower = caps.per_unverified_account
        if (
            lower is not None
            and (per_account is None or lower < per_account)
            and not await self._caller_verified(access)
        ):
            per_account, account_refusal = lower, Refusal.UNVERIFIED_LIMIT
        account_key = f"account:{access.caller.user.id}"
        project_key = f"project:{access.project.id}"
        keys = {email: _recipient_key(email) for email in candidates}

        def over(count: int) -> bool:
            return caps.per_recipient is not None and count >= caps.per_recipient

        def budget(counts: dict[str, int]) -> tuple[int, Refusal]:
            """How many may be mailed by the account's and the project's counts, and which
            of the two says no past that."""
            left, short = len(candidates), account_refusal
            for key, cap, refusal in (
                (account_key, per_account, account_refusal),
                (project_key, caps.per_project, Refusal.PROJECT_LIMIT),
            ):
                if cap is not None and max(cap - counts.get(key, 0), 0) < left:
                    left, short = max(cap - counts.get(key, 0), 0), refusal
            return left, short

        # The counts are read first, unlocked, to choose; then only the rows of the account,
        # the project and the chosen recipients are made and locked (one statement, in key
        # order: `account:` < `project:` < `recipient:`) and read again: a request of a
        # thousand addresses locks no more rows than it may mail, in a few statements.
        seen = await self._counts([account_key, project_key, *keys.values()])
        chosen = [e for e in candidates if not over(seen.get(keys[e], 0))][: budget(seen)[0]]
        locked = await self._locked([account_key, project_key, *(keys[e] for e in chosen)])
        left, short = budget(locked)
        picked = set(chosen)
        for email in candidates:
            if over(locked.get(keys[email], seen.get(keys[email], 0))):
                admission.refused.append(NotInvited(email, Refusal.RECIPIENT_LIMIT))
            elif email in picked and left > 0:
                admission.admitted.append(email)
                left -= 1
            else:
                admission.refused.append(NotInvited(email, short))
        if admission.admitted:
            await self._add(account_key, project_key, [keys[e] for e in admission.admitted])
        # The order asked, whatever the reason.
        order = {email: n for n, email in enumerate(emails)}
        admission.refused.sort(key=lambda r: order[r.email])
        return admission

    # -- blocks -------------------------------------------------------------------------------

    async def blocked(self, emails: Sequence[str]) -> set[str]:
        """Those of `emails` whose owner blocked invitations."""
        return await blocked_addresses(self.db, emails)

    async def block(self, email: str) -> None:
        """No invitation of any project reaches `email` from now on (a second block is
        harmless)."""
        fields = {"address_hash": address_hash(email), "created_at": self.now}
        await insert_unless_present(self.db, InvitationBlock, fields)

    async def unblock(self, email: str) -> None:
        await self.db.execute(
            delete(InvitationBlock).where(InvitationBlock.address_hash == address_hash(email))
        )

    # -- the counters -------------------------------------------------------------------------

    async def _caller_verified(self, access: ProjectAccess) -> bool:
        """Whether the inviting account has verified its address: read from the database, not
        from the caller's record (which the access cache may have kept from before)."""
        verified_at = await self.db.scalar(
            select(User.email_verified_at).where(User.id == access.caller.user.id)
        )
        return verified_at is not None

    async def _project_plan(self, access: ProjectAccess) -> Plan:
        """The plan of the project's best-paid owner."""
        plans = await self.db.scalars(
            select(User.plan)
            .join(ProjectMember, ProjectMember.user_id == User.id)
            .where(
                ProjectMember.project_id == access.project.id,
                ProjectMember.role == ProjectRole.OWNER,
            )
        )
        return max(plans, key=_PLAN_RANK.__getitem__, default=Plan.FREE)

    async def _counts(self, keys: list[str]) -> dict[str, int]:
        if not keys:
            return {}
        rows = await self.db.execute(
            select(InvitationCount.key, InvitationCount.count).where(
                InvitationCount.day == self.day, InvitationCount.key.in_(keys)
            )
        )
        return {str(row[0]): int(row[1]) for row in rows}

    async def _locked(self, keys: list[str]) -> dict[str, int]:
        """The day's counts of `keys`, their rows made if missing and locked until the
        transaction ends, in key order (SQLite, with one writer, needs no row lock)."""
        if not keys:
            return {}
        ordered = sorted(set(keys))
        insert = sqlite.insert if self.db.get_bind().dialect.name == "sqlite" else postgresql.insert
        await self.db.execute(
            insert(InvitationCount).on_conflict_do_nothing(),
            [{"key": key, "day": self.day, "count": 0} for key in ordered],
        )
        rows = await self.db.execute(
            select(InvitationCount.key, InvitationCount.count)
            .where(InvitationCount.day == self.day, InvitationCount.key.in_(ordered))
            .order_by(InvitationCount.key)
            .with_for_update()
        )
        return {str(row[0]): int(row[1]) for row in rows}

    async def _add(self, account_key: str, project_key: str, recipients: list[str]) -> None:
        """Count one mail to each of `recipients`, and as many for the account and the
        project (their rows made and locked by `_locked`)."""
        both = [account_key, project_key]
        await self.db.execute(
            update(InvitationCount)
            .where(InvitationCount.day == self.day, InvitationCount.key.in_([*both, *recipients]))
            .values(
                count=InvitationCount.count
                + case((InvitationCount.key.in_(both), len(recipients)), else_=1)
            )
            .execution_options(synchronize_session=False)
        )

    def _seconds_to_next_day(self) -> int:
        return seconds_to_next_day(self.now)


async def blocked_addresses(db: AsyncSession, emails: Sequence[str]) -> set[str]:
    """Those of `emails` (normalised) whose owner blocked mail from this server."""
    found: set[str] = set()
    unique = list(dict.fromkeys(emails))
    for start in range(0, len(unique), _BLOCKS_PER_STATEMENT):
        hashes = {address_hash(e): e for e in unique[start : start + _BLOCKS_PER_STATEMENT]}
        rows = await db.scalars(
            select(InvitationBlock.address_hash).where(InvitationBlock.address_hash.in_(hashes))
        )
        found.update(hashes[h] for h in rows)
    return found


_BLOCKS_PER_STATEMENT = 1000


async def sweep_invitation_counts(db: AsyncSession, now: datetime) -> None:
    """Forget the counters of days before yesterday (the sweeper's)."""
    today = day_of(now)
    await db.execute(delete(InvitationCount).where(InvitationCount.day < today - 1))


# -- refusals as errors ---------------------------------------------------------------------------


class InvitationsLimited(RateLimited):
    """429: a cap refused some of the addresses. What was done stands (`keeps_writes`) and the
    body says it: `invited` (mailed now), `notInvited` (each with why)."""

    code = "invitation_limit"

    def __init__(
        self, admission: Admission, invited: Sequence[str], *, verb: str = "invited",
        **extensions: object,
    ) -> None:  # fmt: skip
        """`verb`: what was not done to the addresses ("added", for a member)."""
        refused = admission.refused
        capped = [r for r in refused if r.reason is not Refusal.BLOCKED]
        detail = (
            f"{len(capped)} of the addresses were not {verb}: {capped[0].message}; try them "
            "again tomorrow"
            if len(capped) > 1
            else f"{capped[0].email} was not {verb}: {capped[0].message}; try again tomorrow"
        )
        super().__init__(
            detail,
            headers={"Retry-After": str(admission.retry_after)},
            keeps_writes=True,
            extensions={
                **extensions,
                "invited": list(invited),
                "notInvited": not_invited_body(refused),
            },
        )


def not_invited_body(refused: Sequence[NotInvited]) -> list[dict[str, str]]:
    return [{"email": r.email, "reason": r.reason.value, "detail": r.message} for r in refused]


def recipient_blocked(email: str, verb: str = "invited") -> Conflict:
    return Conflict(
        f"{email} was not {verb}: {REASONS[Refusal.BLOCKED]}",
        code="invitations_blocked",
        extensions={
            "invited": [],
            "notInvited": not_invited_body([NotInvited(email, Refusal.BLOCKED)]),
        },
    )


def not_invited_sentences(refused: Sequence[NotInvited], shown: int = 5) -> str:
    """The refusals as the console says them: one sentence per reason, naming a few addresses
    (a thousand would not fit a page's notice)."""
    by_reason: dict[Refusal, list[str]] = {}
    for refusal in refused:
        by_reason.setdefault(refusal.reason, []).append(refusal.email)
    sentences = []
    for reason, emails in by_reason.items():
        named = ", ".join(emails[:shown])
        if len(emails) > shown:
            named += f" and {len(emails) - shown} more"
        later = "" if reason is Refusal.BLOCKED else "; try again tomorrow"
        sentences.append(f"Not invited: {named} ({REASONS[reason]}{later}).")
    return " ".join(sentences)

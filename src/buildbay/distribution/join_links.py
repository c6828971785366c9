"""Public join links of tester groups (issue 40: TestFlight's public link).

A developer (whoever manages the project's groups) makes a link for a group: at most
`maxTesters` people may join through it, only addresses of `allowedEmailDomains` (if any), until
`expiresAt` (if set). Its token is a secret: stored as a hash, shown once (the API's answer to
its creation, the console's page after it), and masked in the access log (`/join/{token}`).
One live link per group: making one again revokes the old one (its count starts again at 0),
which is how a leaked link is replaced. A revoked or expired link's page says so.

Whoever opens the link gives an e-mail address (`request`); the answer is the same whether or not
an account has it, and the work is the same too: a `join_requests` row and a confirmation mail
through the outbox. Not mailed (and told nothing different): an address that blocked mail from
this server, one that had the day's join mails (BUILDBAY_JOIN_LINK_MAILS_PER_ADDRESS_PER_DAY,
whatever link); an address outside the allowed domains is told so before anything is written
(the domains are compared after NFKC and IDNA: a fullwidth or a Unicode domain is the ASCII one
it stands for). Asking is throttled per address and per client IP.

A link's mails have a budget of their own, a UTC day's (BUILDBAY_JOIN_LINK_MAILS_PER_DAY), kept
in `invitation_counts` under the link's key: past it the page says the link takes no more
requests today, and the team's console says the link spent it. They are not invitations of the
link's maker: whoever holds a public link, typing address after address, spends the link's
budget and never the team's invitation caps (invitations/caps.py), so the team still invites
the people it chose that day.

A link is the project's, not its maker's: it keeps working when its maker leaves the project or
is made a tester (a group's public entrance, posted where the team may not reach, does not break
with a change of staff), and anyone who manages the groups replaces or revokes it.

Following the mail's link (`confirm`, a POST from the page it opens: a mail scanner's GET joins
nobody) joins the group: the request is claimed once, the account is made if the address has
none (with no password: its owner sets one with "Forgot password" when they want one), the
person becomes a tester of the project if not a member, and the link's count goes up by a
conditional UPDATE that refuses past `maxTesters`: of the 100th and 101st confirming at once,
one is refused, on PostgreSQL (the row lock of the UPDATE) as on SQLite (one writer). Someone
already in the group is told so and not counted. `joined_count` counts joins, and a tester
removed from the group later keeps their place in it: `maxTesters` bounds how many the link
let in, which removing people does not reopen (a leaked link's newcomers, removed, do not make
room for more of them; the team makes a new link for more). The group's testers remember the
link they came through, so the team sees how many of those who joined are still there.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum

import email_validator
from limits import RateLimitItemPerHour
from sqlalchemy import delete, func, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.audit.record import Actor, AuditAction, Target, record
from buildbay.auth import passwords
from buildbay.auth.logins import user_by_email
from buildbay.auth.models import User
from buildbay.auth.tokens import hash_token
from buildbay.auth.verification import mark_verified
from buildbay.config import Plan, SignupMode
from buildbay.db.concurrency import insert_unless_present, lock_row
from buildbay.distribution.groups import group_not_found
from buildbay.distribution.membership import reach_builds_of_groups, reach_new_member
from buildbay.distribution.models import EVERYONE, GroupTester, JoinLink, JoinRequest, TesterGroup
from buildbay.errors import Conflict, Forbidden, NotFound, RateLimited, ValidationFailed
from buildbay.ids import new_id
from buildbay.invitations.caps import blocked_addresses
from buildbay.invitations.counts import address_hash, day_of, seconds_to_next_day, spend_one
from buildbay.invitations.models import InvitationCount
from buildbay.mail.message import notification
from buildbay.mail.outbox import MailOutbox
from buildbay.mail.unsubscribe import UnsubscribeLinks
from buildbay.projects.authorization import ProjectAccess
from buildbay.projects.enums import ProjectRole
from buildbay.projects.models import Project, ProjectMember
from buildbay.projects.records import MemberRecord, ProjectRecord
from buildbay.ratelimit.limiter import RateLimiter
from buildbay.sso.policy import PASSWORDS_ALLOWED, PasswordPolicy, SsoOnly
from buildbay.text import normal_email_text
from buildbay.webhooks import events as webhook_events

JOIN_TOKEN_PREFIX = "bbj_"
CONFIRM_TOKEN_PREFIX = "bbc_"
JOIN_PAGE = "/join"
CONFIRM_PAGE = "/join-confirm"
CONFIRMATION_LIFETIME = timedelta(days=1)
MAX_DOMAINS = 50
# Asked for at most this often: per address (a mailbox is not flooded) and per client IP.
PER_EMAIL = RateLimitItemPerHour(5)
PER_IP = RateLimitItemPerHour(30)


class LinkState(StrEnum):
    LIVE = "live"
    REVOKED = "revoked"  # revoked, or replaced by a newer link
    EXPIRED = "expired"
    FULL = "full"  # as many joined as it takes


@dataclass(frozen=True, slots=True)
class MailBudget:
    """Confirmation mails a UTC day: per link (None: no cap) and per address."""

    per_link: int | None
    per_address: int


@dataclass(frozen=True, slots=True)
class JoinLinkRecord:
    id: str
    group_id: str
    max_testers: int | None
    allowed_domains: list[str]
    expires_at: datetime | None
    created_at: datetime
    revoked_at: datetime | None
    joined_count: int
    state: LinkState
    in_group: int = 0  # of those who joined through it, those in the group now
    mails_today: int = 0  # confirmation mails sent through it this UTC day
    mails_per_day: int | None = None  # its budget (None: no cap)

    @property
    def budget_spent(self) -> bool:
        """It mailed as many confirmations today as it may: its page takes no more."""
        return self.mails_per_day is not None and self.mails_today >= self.mails_per_day


@dataclass(frozen=True, slots=True)
class JoinPage:
    """What a link's public page shows."""

    link: JoinLinkRecord
    project_name: str
    group_name: str


class JoinOutcome(StrEnum):
    JOINED = "joined"
    ALREADY = "already"  # was in the group already


@dataclass(frozen=True, slots=True)
class Joined:
    outcome: JoinOutcome
    project_id: str
    group_name: str
    project_name: str
    user_id: str
    new_account: bool  # made by this confirmation (no password yet)


def join_link_url(public_url: str, token: str) -> str:
    return f"{public_url}{JOIN_PAGE}/{token}"


def normal_domain(value: str) -> str | None:
    """A domain as compared: NFKC and lower case (the project's address normalisation), then
    IDNA's ASCII form (`bücher.example` is `xn--bcher-kva.example`); None if it is not one."""
    text = normal_email_text(value.strip()).removeprefix("@").rstrip(".")
    if not text or "@" in text:
        return None
    try:
        checked = email_validator.validate_email(
            f"x@{text}", check_deliverability=False, allow_smtputf8=False
        )
    except email_validator.EmailNotValidError:
        return None
    return str(checked.ascii_domain).lower()


def domain_of_address(email: str) -> str | None:
    return normal_domain(email.rpartition("@")[2])


def _state(link: JoinLink, now: datetime) -> LinkState:
    if link.revoked_at is not None:
        return LinkState.REVOKED
    if link.expires_at is not None and link.expires_at <= now:
        return LinkState.EXPIRED
    if link.max_testers is not None and link.joined_count >= link.max_testers:
        return LinkState.FULL
    return LinkState.LIVE


def _record(link: JoinLink, now: datetime) -> JoinLinkRecord:
    return JoinLinkRecord(
        link.id, link.group_id, link.max_testers, list(link.allowed_domains), link.expires_at,
        link.created_at, link.revoked_at, link.joined_count, _state(link, now),
    )  # fmt: skip


def _link_key(link_id: str) -> str:
    """The link's counter of confirmation mails in `invitation_counts`."""
    return f"join-link:{link_id}"


def _address_key(email: str) -> str:
    """An address's counter of join mails (apart from its invitations' `recipient:`)."""
    return f"join-address:{address_hash(email)}"


def no_join_link() -> NotFound:
    return NotFound("This group has no live join link", code="join_link_not_found")


class JoinLinks:
    """Join links, in the request's unit of work."""

    def __init__(
        self, db: AsyncSession, now: datetime, mail: MailOutbox, public_url: str,
        budget: MailBudget, unsubscribe: UnsubscribeLinks, signup: SignupMode,
        passwords: PasswordPolicy = PASSWORDS_ALLOWED,
    ) -> None:  # fmt: skip
        """`passwords`: with BUILDBAY_OIDC_ONLY, accounts are made by the identity provider
        only (sso/policy.py), so a confirmation joins an existing account and makes none."""
        self.db = db
        self.now = now
        self.mail = mail
        self.public_url = public_url
        self.budget = budget
        self.unsubscribe = unsubscribe
        self.signup = signup
        self.passwords = passwords

    # -- the team's side ------------------------------------------------------------------------

    async def create(
        self, access: ProjectAccess, group_id: str, max_testers: int | None,
        domains: list[str], expires_at: datetime | None,
    ) -> tuple[JoinLinkRecord, str]:  # fmt: skip
        """A new live link for the group (the old one, if any, revoked), and its token."""
        await self._group(access.project, group_id)
        if len(domains) > MAX_DOMAINS:  # the API's schema says so too; the console's form not
            raise ValidationFailed.for_field(
                "allowedEmailDomains", f"takes at most {MAX_DOMAINS} domains"
            )
        normal = []
        for n, domain in enumerate(domains):
            found = normal_domain(domain)
            if found is None:
                raise ValidationFailed.for_field(
                    f"allowedEmailDomains[{n}]", "is not a domain name such as example.com"
                )
            normal.append(found)
        if expires_at is not None and expires_at <= self.now:
            raise ValidationFailed.for_field("expiresAt", "must be in the future")
        # One live link per group: two creations at once take turns on the group's row.
        await lock_row(self.db, TesterGroup.id, group_id)
        await self._revoke_live(group_id)
        token = JOIN_TOKEN_PREFIX + secrets.token_urlsafe(32)
        link = JoinLink(
            id=new_id("jln"), project_id=access.project.id, group_id=group_id,
            token_hash=hash_token(token), max_testers=max_testers,
            allowed_domains=list(dict.fromkeys(normal)), expires_at=expires_at,
            created_by=access.caller.user.id, created_at=self.now, revoked_at=None,
            joined_count=0,
        )  # fmt: skip
        self.db.add(link)
        await self.db.flush()
        return await self._counted(link), token

    async def live(self, project: ProjectRecord, group_id: str) -> JoinLinkRecord:
        """The group's newest link that is not revoked (expired or full included: the team
        sees why it no longer takes anyone); 404 if there is none."""
        await self._group(project, group_id)
        link = await self._newest(group_id)
        if link is None:
            raise no_join_link()
        return await self._counted(link)

    async def revoke(self, project: ProjectRecord, group_id: str) -> None:
        await self._group(project, group_id)
        if not await self._revoke_live(group_id):
            raise no_join_link()

    # -- the public side ------------------------------------------------------------------------

    async def page(self, token: str) -> JoinPage:
        """The link of a token, for its page (any state); 404 for a token never made."""
        row = (
            await self.db.execute(
                select(JoinLink, Project.name, TesterGroup.name)
                .join(Project, Project.id == JoinLink.project_id)
                .join(TesterGroup, TesterGroup.id == JoinLink.group_id)
                .where(JoinLink.token_hash == hash_token(token))
            )
        ).first()
        if row is None:
            raise NotFound("This join link is not one Buildbay made", code="join_link_not_found")
        link, project_name, group_name = row
        return JoinPage(_record(link, self.now), project_name, group_name)

    async def request(
        self, token: str, email: str, client_ip: str, limiter: RateLimiter
    ) -> JoinPage:
        """Mail a confirmation link to `email` (normalised), if the link takes it."""
        shown = await self.page(token)
        link = shown.link
        if link.state is not LinkState.LIVE:
            raise Conflict(_STATE_SAYS[link.state], code=f"join_link_{link.state.value}")
        # The client first, whatever it asks (a domain refused counts too); then the address.
        await _throttle(limiter, "join-ip", client_ip, PER_IP)
        if link.allowed_domains and domain_of_address(email) not in link.allowed_domains:
            raise ValidationFailed.for_field(
                "email",
                "this link takes addresses of " + ", ".join(link.allowed_domains) + " only",
                code="domain_not_allowed",
            )
        await _throttle(limiter, "join-email", email, PER_EMAIL)
        if await self._admitted(link, email):  # else told the same: no mail, nothing said
            confirm = CONFIRM_TOKEN_PREFIX + secrets.token_urlsafe(32)
            self.db.add(
                JoinRequest(
                    token_hash=hash_token(confirm), link_id=link.id, email=email,
                    created_at=self.now, expires_at=self.now + CONFIRMATION_LIFETIME,
                    used_at=None,
                )
            )  # fmt: skip
            mail = notification(
                "join_confirmation",
                email,
                f"Confirm to join {shown.project_name} on Buildbay",
                self.unsubscribe.address_url(email),
                project=shown.project_name,
                group=shown.group_name,
                link=f"{self.public_url}{CONFIRM_PAGE}/{confirm}",
            )
            self.mail.send(self.db, mail, self.now)
        return shown

    async def confirmation(self, token: str) -> JoinPage | None:
        """The link a confirmation token is for, if the token can still be used."""
        link = await self.db.scalar(
            select(JoinLink).join(JoinRequest, JoinRequest.link_id == JoinLink.id)
            .where(JoinRequest.token_hash == hash_token(token), JoinRequest.used_at.is_(None),
                   JoinRequest.expires_at > self.now)
        )  # fmt: skip
        if link is None:
            return None
        project = await self.db.get_one(Project, link.project_id)
        group = await self.db.get_one(TesterGroup, link.group_id)
        return JoinPage(_record(link, self.now), project.name, group.name)

    async def confirm(self, token: str, signed_in_as: str | None = None) -> Joined:
        """Join the group with the confirmed address (see the module). An account that never
        verified its address joins only with its owner signed in (`signed_in_as`, the user id
        of the page's visitor): whoever signed up with the address may not be the person who
        reads its mail, and the mail's link must not make that stranger a tester."""
        claimed = (
            await self.db.execute(
                update(JoinRequest)
                .where(
                    JoinRequest.token_hash == hash_token(token),
                    JoinRequest.used_at.is_(None),
                    JoinRequest.expires_at > self.now,
                )
                .values(used_at=self.now)
                .returning(JoinRequest.link_id, JoinRequest.email)
            )
        ).first()
        if claimed is None:
            raise ValidationFailed.for_field(
                "token",
                "this confirmation link was used already, or is more than a day old; open the "
                "join link again to get a new one",
                code="invalid_token",
            )
        link_id, email = claimed
        link = await self.db.get_one(JoinLink, link_id)
        project = await self.db.get_one(Project, link.project_id)
        group = await self.db.get_one(TesterGroup, link.group_id)
        user, new_account = await self._account(email)
        member_role = await self.db.scalar(
            select(ProjectMember.role).where(
                ProjectMember.project_id == project.id, ProjectMember.user_id == user.id
            )
        )
        if member_role is not None and await self.db.scalar(
            select(GroupTester.user_id).where(
                GroupTester.group_id == group.id, GroupTester.user_id == user.id
            )
        ):
            return Joined(JoinOutcome.ALREADY, project.id, group.name, project.name, user.id, False)
        if not new_account and not user.email_verified:
            if signed_in_as != user.id:
                raise Conflict(
                    f"An account with {email} exists but has not verified this address, so "
                    f"it may not be yours: {self._to_prove_it()}, then open this confirmation "
                    "link again",
                    code="account_not_verified",
                )
            mark_verified(user, self.now)  # its owner, signed in, read the mail
        await self._count(link)
        if member_role is None:
            fields = {"project_id": project.id, "user_id": user.id, "role": ProjectRole.TESTER,
                      "created_at": self.now}  # fmt: skip
            if await insert_unless_present(self.db, ProjectMember, fields):
                await reach_new_member(self.db, self.now, project.id, user.id, user.email)
                joined = MemberRecord(
                    project.id, user.id, user.email, user.name, ProjectRole.TESTER, self.now,
                    user.email_verified,
                )  # fmt: skip
                await webhook_events.member_added(self.db, joined, self.now)
                # By the person themself, through the group's join link (the mail proved it).
                details = {"role": ProjectRole.TESTER.value, "joinLinkId": link.id}
                record(self.db, at=self.now, actor=Actor.of(user),
                       action=AuditAction.MEMBER_ADDED, target=Target("user", user.id, user.email),
                       project_id=project.id, subject_user_id=user.id, details=details)  # fmt: skip
        fields = {"group_id": group.id, "user_id": user.id, "added_at": self.now,
                  "join_link_id": link.id}  # fmt: skip
        await insert_unless_present(self.db, GroupTester, fields)
        await reach_builds_of_groups(self.db, self.now, project.id, [user.id], [group.id])
        return Joined(
            JoinOutcome.JOINED, project.id, group.name, project.name, user.id, new_account
        )

    # -- helpers --------------------------------------------------------------------------------

    def _to_prove_it(self) -> str:
        """How the owner of an unverified account proves the address is theirs here."""
        if self.passwords.sso_only:  # no password or reset: the provider's sign-in proves it
            return (
                f"sign in with {self.passwords.provider_name} (its verified address proves yours)"
            )
        return (
            "sign in to it, or choose a new password with Forgot your password (the mail "
            "proves the address)"
        )

    async def _account(self, email: str) -> tuple[User, bool]:
        """The address's account, made if there is none: the mail's link proved the address;
        its password is a random one nobody knows, until its owner sets one (Forgot
        password)."""
        user = await user_by_email(self.db, email)
        if user is not None:
            return user, False
        if self.signup is SignupMode.CLOSED:
            raise Forbidden(
                "This server takes no new accounts: ask its operator for one, then open the "
                "join link again",
                code="signup_closed",
            )
        if not self.passwords.may_use_password(email):
            # The provider's sign-in makes the account (within BUILDBAY_OIDC_ALLOWED_DOMAINS);
            # one made here could never sign in again, and would slip past those domains.
            raise SsoOnly(
                f"This server makes accounts only through {self.passwords.provider_name}: sign "
                f"in with {self.passwords.provider_name}, then open this confirmation link again"
            )
        user = User(
            id=new_id("usr"), email=email, name=email.split("@", 1)[0],
            password_hash=await passwords.hash_password(secrets.token_urlsafe(32)),
            plan=Plan.FREE, created_at=self.now, updated_at=self.now, credentials_epoch=0,
        )  # fmt: skip
        mark_verified(user, self.now)
        if not await insert_unless_present(self.db, User, _columns(user)):
            found = await user_by_email(self.db, email)  # made a moment ago by another request
            assert found is not None
            return found, False
        return await self.db.get_one(User, user.id), True

    async def _count(self, link: JoinLink) -> None:
        """One more joined through `link`, if it is live and not full: decided by one
        conditional UPDATE, which concurrent confirmations take in turn."""
        conditions = [JoinLink.id == link.id, JoinLink.revoked_at.is_(None)]
        if link.expires_at is not None:
            conditions.append(JoinLink.expires_at > self.now)
        counted = await self.db.execute(
            update(JoinLink)
            .where(
                *conditions,
                (JoinLink.max_testers.is_(None)) | (JoinLink.joined_count < JoinLink.max_testers),
            )
            .values(joined_count=JoinLink.joined_count + 1)
            .execution_options(synchronize_session=False)
        )
        if not counted.rowcount:  # type: ignore[attr-defined]
            await self.db.refresh(link)
            state = _state(link, self.now)
            if state is LinkState.LIVE:  # cannot be: the UPDATE said otherwise
                state = LinkState.FULL
            raise Conflict(_STATE_SAYS[state], code=f"join_link_{state.value}")

    async def _admitted(self, link: JoinLinkRecord, email: str) -> bool:
        """Whether a confirmation mail may go to `email`, spending the address's and the
        link's counters of the day (in that order, the same in every request: no two wait on
        each other). False, unsaid, for a blocked address or one that had the day's join mails;
        the link's budget spent is said (429): it is the link's, not the address's."""
        if await blocked_addresses(self.db, [email]):
            return False
        if not await spend_one(self.db, self.now, _address_key(email), self.budget.per_address):
            return False
        per_link = self.budget.per_link
        if per_link is not None and not await spend_one(
            self.db, self.now, _link_key(link.id), per_link
        ):
            raise RateLimited(
                "This join link has sent as many confirmation mails as it may today; try "
                "again tomorrow",
                code="join_link_busy",
                headers={"Retry-After": str(seconds_to_next_day(self.now))},
            )
        return True

    async def _counted(self, link: JoinLink) -> JoinLinkRecord:
        """The link's record for the team: who of those it let in are in the group now, and
        its confirmation mails of the day."""
        in_group = await self.db.scalar(
            select(func.count()).select_from(GroupTester).where(GroupTester.join_link_id == link.id)
        )
        mails = await self.db.scalar(
            select(InvitationCount.count).where(
                InvitationCount.key == _link_key(link.id),
                InvitationCount.day == day_of(self.now),
            )
        )
        return replace(
            _record(link, self.now), in_group=in_group or 0, mails_today=mails or 0,
            mails_per_day=self.budget.per_link,
        )  # fmt: skip

    async def _group(self, project: ProjectRecord, group_id: str) -> None:
        if group_id == EVERYONE:
            raise Conflict(
                "The group everyone holds all the project's members; make a join link for "
                "one of the project's own groups",
                code="builtin_group",
            )
        found = await self.db.scalar(
            select(TesterGroup.id).where(
                TesterGroup.id == group_id, TesterGroup.project_id == project.id
            )
        )
        if found is None:
            raise group_not_found()

    async def _newest(self, group_id: str) -> JoinLink | None:
        return await self.db.scalar(
            select(JoinLink)
            .where(JoinLink.group_id == group_id, JoinLink.revoked_at.is_(None))
            .order_by(JoinLink.created_at.desc(), JoinLink.id.desc())
            .limit(1)
        )

    async def _revoke_live(self, group_id: str) -> bool:
        revoked = await self.db.execute(
            update(JoinLink)
            .where(JoinLink.group_id == group_id, JoinLink.revoked_at.is_(None))
            .values(revoked_at=self.now)
            .execution_options(synchronize_session=False)
        )
        return bool(revoked.rowcount)  # type: ignore[attr-defined]


async def _throttle(
    limiter: RateLimiter, namespace: str, key: str, item: RateLimitItemPerHour
) -> None:
    if (wait := await limiter.throttle(namespace, key, item)) is not None:
        raise RateLimited(
            "Too many requests to join; wait before asking again",
            code="join_throttled",
            headers={"Retry-After": str(wait)},
        )


def _columns(user: User) -> dict[str, object]:
    return {
        "id": user.id, "email": user.email, "name": user.name,
        "password_hash": user.password_hash, "plan": user.plan, "created_at": user.created_at,
        "updated_at": user.updated_at, "credentials_epoch": user.credentials_epoch,
        "notify_new_builds": True, "email_verified_at": user.email_verified_at,
    }  # fmt: skip


_STATE_SAYS = {
    LinkState.REVOKED: "This join link was turned off by the project's team; ask them for a "
    "new one",
    LinkState.EXPIRED: "This join link has expired; ask the project's team for a new one",
    LinkState.FULL: "This join link has as many testers as it takes; ask the project's team "
    "for a new one",
    LinkState.LIVE: "",
}


async def sweep_join_requests(db: AsyncSession, now: datetime) -> None:
    """Forget confirmations a day after they expired, used or not (the sweeper's)."""
    await db.execute(
        delete(JoinRequest).where(JoinRequest.expires_at < now - CONFIRMATION_LIFETIME)
    )


def state_sentence(state: LinkState) -> str:
    return _STATE_SAYS[state]

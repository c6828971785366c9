"""Projects and their members: what changes them, in a unit of work (reading is
projects/reads.py's).

Adding an account as a member by its e-mail, when the account has not verified that address,
is an invitation in all but name: whoever signed up with the address may be a stranger who
never asked, and membership brings them new-build mails. So it is counted against the day's
invitation caps (the address's, the adding account's, the project's) and refused for an
address that blocked mail from this server, with the invitation paths' 429 and 409
(invitations/caps.py). Adding a verified account is not counted: its owner proved the address
and chose to be reachable here."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from sqlalchemy import delete, func, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.audit.record import Actor, AuditAction, Target, record
from buildbay.auth.models import User
from buildbay.auth.reads import UserRecord
from buildbay.builds.models import Build
from buildbay.builds.removal import keys_of_builds_under, remove_stored_files
from buildbay.db.concurrency import insert_unless_present, lock_row
from buildbay.db.engine import after_commit
from buildbay.db.reads import Reads
from buildbay.distribution.membership import leave_groups, reach_new_member
from buildbay.errors import Conflict, Forbidden, NotFound, ValidationFailed
from buildbay.feedback.removal import screenshots_prefix
from buildbay.ids import new_id
from buildbay.invitations.caps import CapsOf, InvitationCaps, InvitationsLimited, recipient_blocked
from buildbay.projects.authorization import ProjectAccess
from buildbay.projects.enums import ProjectRole
from buildbay.projects.models import Project, ProjectMember
from buildbay.projects.reads import (
    PROJECT,
    ProjectView,
    member,
    owned_project_named,
    owner_ids,
    project_view,
)
from buildbay.projects.records import MemberRecord, ProjectRecord
from buildbay.storage.base import Storage
from buildbay.text import normal_email_text
from buildbay.webhooks import events as webhook_events


class ProjectService:
    def __init__(self, db: AsyncSession, now: datetime, caps: CapsOf | None = None) -> None:
        """`caps`: the day's invitation caps (Settings.invitations_per_day), which adding an
        unverified account as a member needs."""
        self.db = db
        self.now = now
        self.reads = Reads.within(db)
        self.caps = caps

    async def create(self, owner: UserRecord, name: str) -> ProjectView:
        # The owner's row lock makes two creations of one name by one owner take turns.
        await lock_row(self.db, User.id, owner.id)
        if await owned_project_named(self.reads, [owner.id], name) is not None:
            raise Conflict(f"You already own a project named {name}", code="name_taken")
        project = Project(id=new_id("prj"), name=name, created_at=self.now, updated_at=self.now)
        self.db.add(project)
        await self.db.flush()  # the project row before the membership that points at it
        self.db.add(
            ProjectMember(
                project_id=project.id, user_id=owner.id, role=ProjectRole.OWNER, created_at=self.now
            )
        )
        await self.db.flush()
        self._record(Actor.of(owner), AuditAction.PROJECT_CREATED, project.id, name)
        return ProjectView(PROJECT.of_entity(project), 0)

    async def rename(self, project: ProjectRecord, name: str, *, by: Actor) -> ProjectView:
        owners = await owner_ids(self.reads, project.id)
        for user_id in sorted(owners):  # in one order: two renames never wait on each other
            await lock_row(self.db, User.id, user_id)
        if await owned_project_named(self.reads, owners, name, other_than=project.id):
            raise Conflict(
                f"An owner of this project already owns a project named {name}",
                code="name_taken",
            )
        await self.db.execute(
            update(Project).where(Project.id == project.id).values(name=name, updated_at=self.now)
        )
        if name != project.name:
            self._record(by, AuditAction.PROJECT_RENAMED, project.id, name, {"from": project.name})
        return await project_view(self.reads, replace(project, name=name, updated_at=self.now))

    async def delete(self, project: ProjectRecord, storage: Storage, *, by: Actor) -> None:
        """Rows go in the unit of work (cascading to applications and builds), the files once
        it has committed: a failure can only leave orphan files (the sweeper's), never a build
        whose bytes are gone; an upload finishing meanwhile cannot leave its file behind (see
        builds.removal)."""
        keys = await keys_of_builds_under(self.db, Project.id, Build.project_id, project.id)
        await self.db.execute(delete(Project).where(Project.id == project.id))
        self._record(by, AuditAction.PROJECT_DELETED, project.id, project.name)
        prefix = f"{project.id}/"
        after_commit(self.db, lambda: remove_stored_files(storage, keys, prefix))
        # Its feedback went with its builds: the screenshots are all under one prefix.
        after_commit(self.db, lambda: storage.delete_prefix(screenshots_prefix(project.id)))

    # -- members ----------------------------------------------------------------------------------

    async def add_member(
        self, access: ProjectAccess, email: str, role: ProjectRole, *, unverified_ok: bool = True
    ) -> MemberRecord:
        """Make the account with `email` a member. `unverified_ok=False` (the console, until
        the admin confirms): 409 `email_not_verified` if the account never proved the address
        is its own, since whoever signed up with it may not be the person the admin means."""
        require_owner_for_owner_role(access, role)
        user = await self.db.scalar(select(User).where(User.email == normal_email_text(email)))
        if user is None:
            raise ValidationFailed.for_field(
                "email",
                "no Buildbay account has this e-mail; ask them to register first",
                code="user_not_found",
            )
        if not unverified_ok and not user.email_verified:
            if await member(self.reads, access.project.id, user.id) is not None:
                raise already_member()  # said first: there is nothing to confirm
            raise Conflict(
                f"The account with {user.email} has not verified this e-mail address: whoever "
                "signed up with it may not be the person you mean. Add it anyway, or invite the "
                "address instead (accepting the invitation proves it)",
                code="email_not_verified",
            )
        if not user.email_verified:
            await self._admit_unverified(access, user)
        # Not a look-up then an insert: two requests at once (a double-click) would both find
        # no membership, and the second insert would break the primary key.
        fields = {"project_id": access.project.id, "user_id": user.id,
                  "role": role, "created_at": self.now}  # fmt: skip
        if not await insert_unless_present(self.db, ProjectMember, fields):
            raise already_member()
        await reach_new_member(self.db, self.now, access.project.id, user.id, user.email)
        added = MemberRecord(access.project.id, user.id, user.email, user.name, role, self.now,
                             user.email_verified)  # fmt: skip
        await webhook_events.member_added(self.db, added, self.now)
        self._record_member(access, AuditAction.MEMBER_ADDED, added, {"role": role.value})
        return added

    async def _admit_unverified(self, access: ProjectAccess, user: User) -> None:
        """Count adding `user` (unverified) as one invitation to its address: 409
        `invitations_blocked` for a blocked address, 429 `invitation_limit` past a cap, and
        nothing counted for someone who is a member already (409 `already_member`)."""
        if self.caps is None:
            raise RuntimeError("adding an unverified account needs the invitation caps")
        # The project's row first, as every invitation path takes it before the counters: an
        # invite holding it and waiting for a counter this add holds, while this add's member
        # row waits for the project's key lock, would be a deadlock.
        await self._lock_members(access.project)
        if await member(self.reads, access.project.id, user.id) is not None:
            raise already_member()
        admission = await InvitationCaps(self.db, self.now, self.caps).admit(access, [user.email])
        if admission.capped:
            raise InvitationsLimited(admission, [], verb="added")
        if admission.refused:
            raise recipient_blocked(user.email, "added")

    async def change_role(
        self, access: ProjectAccess, user_id: str, role: ProjectRole
    ) -> MemberRecord:
        await self._lock_members(access.project)
        found = await self._member(access.project, user_id)
        if ProjectRole.OWNER in (role, found.role):
            require_owner_for_owner_role(access, ProjectRole.OWNER)
        if found.role is ProjectRole.OWNER and role is not ProjectRole.OWNER:
            await self._ensure_another_owner(access.project, user_id)
        await self.db.execute(
            update(ProjectMember)
            .where(ProjectMember.project_id == access.project.id, ProjectMember.user_id == user_id)
            .values(role=role)
        )
        changed = replace(found, role=role)
        if role is not found.role:
            await webhook_events.member_role_changed(self.db, changed, found.role, self.now)
            details = {"from": found.role.value, "to": role.value}
            self._record_member(access, AuditAction.MEMBER_ROLE_CHANGED, changed, details)
        return changed

    async def remove_member(self, access: ProjectAccess, user_id: str) -> None:
        await self._lock_members(access.project)
        found = await self._member(access.project, user_id)
        leaving_themself = user_id == access.caller.user.id
        if not leaving_themself:
            if not access.role.includes(ProjectRole.ADMIN):
                raise Forbidden(
                    "Removing another member needs the admin role or higher",
                    code="insufficient_role",
                )
            if found.role is ProjectRole.OWNER:
                require_owner_for_owner_role(access, ProjectRole.OWNER)
        if found.role is ProjectRole.OWNER:
            await self._ensure_another_owner(access.project, user_id)
        await webhook_events.member_removed(self.db, found, self.now)
        await self.db.execute(
            delete(ProjectMember).where(
                ProjectMember.project_id == access.project.id, ProjectMember.user_id == user_id
            )
        )
        await leave_groups(self.db, access.project.id, user_id)
        self._record_member(access, AuditAction.MEMBER_REMOVED, found, {"role": found.role.value})

    def _record(
        self,
        by: Actor,
        action: AuditAction,
        project_id: str,
        name: str,
        details: dict[str, str] | None = None,
    ) -> None:
        target = Target("project", project_id, name)
        record(self.db, at=self.now, actor=by, action=action, target=target,
               project_id=project_id, details=details)  # fmt: skip

    def _record_member(
        self, access: ProjectAccess, action: AuditAction, member: MemberRecord,
        details: dict[str, str],
    ) -> None:  # fmt: skip
        """An entry about `member`, which their own account's log shows too."""
        record(self.db, at=self.now, actor=Actor.of(access.caller.user), action=action,
               target=Target("user", member.user_id, member.email),
               project_id=access.project.id, subject_user_id=member.user_id,
               details=details)  # fmt: skip

    async def _lock_members(self, project: ProjectRecord) -> None:
        """Hold the project's member list still until the transaction ends.

        The last-owner rule is a count followed by a write: two owners leaving (or demoting
        themselves) at the same moment would each count the other and both go. Every change of
        a role or a membership locks the project's row first, so they take turns, and each
        counts what the one before it committed.
        """
        if not await lock_row(self.db, Project.id, project.id):
            raise NotFound("No project with this id", code="project_not_found")

    async def _member(self, project: ProjectRecord, user_id: str) -> MemberRecord:
        found = await member(self.reads, project.id, user_id)
        if found is None:
            raise NotFound("No member with this user id in the project", code="member_not_found")
        return found

    async def _ensure_another_owner(self, project: ProjectRecord, leaving_user_id: str) -> None:
        others = await self.reads.scalar(
            select(func.count())
            .select_from(ProjectMember)
            .where(
                ProjectMember.project_id == project.id,
                ProjectMember.role == ProjectRole.OWNER,
                ProjectMember.user_id != leaving_user_id,
            )
        )
        if not others:
            raise Conflict(
                "A project keeps at least one owner; make someone else owner first",
                code="last_owner",
            )


def require_owner_for_owner_role(access: ProjectAccess, role: ProjectRole) -> None:
    if role is ProjectRole.OWNER and access.role is not ProjectRole.OWNER:
        raise Forbidden(
            "Only an owner can grant or remove the owner role", code="insufficient_role"
        )


def already_member() -> Conflict:
    return Conflict("This user is already a member of the project", code="already_member")

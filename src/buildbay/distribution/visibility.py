"""Which builds a tester sees: those distributed to them, directly (by e-mail or as a member
reached) or through a group they are in, `everyone` included. Developers and above see all."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlalchemy import bindparam, exists, or_, select

from buildbay.builds.models import Build
from buildbay.distribution.models import EVERYONE, BuildGroup, BuildRecipient, GroupTester
from buildbay.errors import Forbidden
from buildbay.projects.enums import ProjectRole

if TYPE_CHECKING:
    # For the annotation only: the reads that count what a viewer sees (applications/reads.py)
    # are imported by authorization, and import this module.
    from buildbay.projects.authorization import ApplicationAccess, ProjectAccess


@dataclass(frozen=True, slots=True)
class Viewer:
    """A tester, whose builds are those distributed to them."""

    user_id: str
    email: str


def viewer_of(role: ProjectRole, user_id: str, email: str) -> Viewer | None:
    """None for a role that sees every build (developer and above)."""
    return None if role.includes(ProjectRole.DEVELOPER) else Viewer(user_id, email)


def tester_of(access: ApplicationAccess) -> Viewer | None:
    """The caller of `access`, if they see only the builds distributed to them (a tester)."""
    user = access.caller.user
    return viewer_of(access.role, user.id, user.email)


def project_tester_of(access: ProjectAccess) -> Viewer | None:
    """The caller of a project's `access`, if they see only the builds distributed to them."""
    user = access.caller.user
    return viewer_of(access.role, user.id, user.email)


# True for a build (a row of `builds` in the query) distributed to the viewer whose id and
# e-mail are bound as `viewer_id` and `viewer_email` (`viewer_params`). Bound, not written in:
# a statement built once with it is compiled, and its cache key made, once (composing it for
# each request cost a tester's read of a build about a millisecond).
DISTRIBUTED_TO_VIEWER = or_(
    exists().where(
        BuildGroup.build_id == Build.id,
        or_(
            BuildGroup.group_id == EVERYONE,
            BuildGroup.group_id.in_(
                select(GroupTester.group_id).where(GroupTester.user_id == bindparam("viewer_id"))
            ),
        ),
    ),
    exists().where(
        BuildRecipient.build_id == Build.id,
        or_(
            BuildRecipient.user_id == bindparam("viewer_id"),
            BuildRecipient.email == bindparam("viewer_email"),
        ),
    ),
)


def viewer_params(viewer: Viewer) -> dict[str, str]:
    """The parameters of DISTRIBUTED_TO_VIEWER."""
    return {"viewer_id": viewer.user_id, "viewer_email": viewer.email}


def not_distributed() -> Forbidden:
    return Forbidden(
        "This build was not distributed to you; ask a developer of the project for it",
        code="not_distributed",
    )


# True for a build (a row of `builds` in the query) distributed to `everyone`: every member of
# its project may open it. The update check offers only such builds (updates/check.py): its key
# ships inside every installed copy, so what it offers, it offers to every tester.
DISTRIBUTED_TO_EVERYONE = exists().where(
    BuildGroup.build_id == Build.id, BuildGroup.group_id == EVERYONE
)

"""Which builds a tester sees: those distributed to them, directly (by e-mail) or through a
group they are in, `everyone` included. Developers and above see all.

The one rule of who may open a build: the API and the console ask it of the caller (`viewer_of`,
by way of projects/authorization.py's `tester_of`; DISTRIBUTED_TO_VIEWER), and an install link
made for one person asks it of that person each time the link is opened (`OPENED_BY_OWNER`,
builds/install.py). So a personal link stops working the moment its person loses the build
(removed from the project, a lower role, out of the only group it reached them through, the
group deleted) and works again if they get it back; nothing has to be revoked when membership
changes.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import ColumnElement, and_, bindparam, exists, or_, select

from buildbay.auth.models import User
from buildbay.builds.models import Build, InstallLink
from buildbay.distribution.models import EVERYONE, BuildGroup, BuildRecipient, GroupTester
from buildbay.errors import Forbidden
from buildbay.projects.enums import ProjectRole
from buildbay.projects.models import ProjectMember


@dataclass(frozen=True, slots=True)
class Viewer:
    """A tester, whose builds are those distributed to them."""

    user_id: str
    email: str


def viewer_of(role: ProjectRole, user_id: str, email: str) -> Viewer | None:
    """None for a role that sees every build (developer and above)."""
    return None if role.includes(ProjectRole.DEVELOPER) else Viewer(user_id, email)


def _distributed_to(
    user_id: ColumnElement[str | None], email: ColumnElement[str | None]
) -> ColumnElement[bool]:
    """True for a build (a row of `builds` in the query) distributed to this person: to a group
    they are in now (`everyone` included), or to them by name (their account, or their address
    while no account holds the row). A row that only says a group
    reached them once (`direct` false) gives nothing: they may have left that group.

    Correlated by name, not left to SQLAlchemy's guess: `user_id` may be a column of the
    enclosing query (OPENED_BY_OWNER), two levels above the groups' subquery, where implicit
    correlation does not reach (and the subquery would read every user's groups)."""
    groups = select(GroupTester.group_id).where(GroupTester.user_id == user_id)
    return or_(
        exists()
        .where(
            BuildGroup.build_id == Build.id,
            or_(
                BuildGroup.group_id == EVERYONE,
                BuildGroup.group_id.in_(groups.correlate_except(GroupTester)),
            ),
        )
        .correlate_except(BuildGroup),
        exists()
        .where(
            BuildRecipient.build_id == Build.id,
            BuildRecipient.direct.is_(True),
            # By account; by address only a row no account has yet (an invitee's, adopted when
            # they join): a row of a tester who moved to another address is not given to
            # whoever holds their old one next.
            or_(
                BuildRecipient.user_id == user_id,
                and_(BuildRecipient.user_id.is_(None), BuildRecipient.email == email),
            ),
        )
        .correlate_except(BuildRecipient),
    )


# True for a build (a row of `builds` in the query) distributed to the viewer whose id and
# e-mail are bound as `viewer_id` and `viewer_email` (`viewer_params`). Bound, not written in:
# a statement built once with it is compiled, and its cache key made, once (composing it for
# each request cost a tester's read of a build about a millisecond).
DISTRIBUTED_TO_VIEWER = _distributed_to(bindparam("viewer_id"), bindparam("viewer_email"))

_SEES_EVERY_BUILD = [role for role in ProjectRole if role.includes(ProjectRole.DEVELOPER)]
# The person of a personal install link: a statement that reads OPENED_BY_OWNER outer-joins it
# as `LINK_OWNER.c.id == InstallLink.owner_id`.
LINK_OWNER = User.__table__.alias("link_owner")
_OWNER_ROLE = (
    select(ProjectMember.role)
    .where(ProjectMember.project_id == Build.project_id, ProjectMember.user_id == LINK_OWNER.c.id)
    .correlate_except(ProjectMember)
    .scalar_subquery()
)
# True for an install link (a row of `install_links`, beside its build's row of `builds` and
# its LINK_OWNER) whose person may open the build now, as the API would let them (a member,
# developer or above, or a tester it is distributed to); always true for a shared link (nobody's
# own).
OPENED_BY_OWNER = or_(
    InstallLink.owner_id.is_(None),
    _OWNER_ROLE.in_(_SEES_EVERY_BUILD),
    and_(_OWNER_ROLE.is_not(None), _distributed_to(LINK_OWNER.c.id, LINK_OWNER.c.email)),
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

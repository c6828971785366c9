"""Authorization's rules, in one place: the project (and application) a caller names, checked for
the caller's role and, for an API token, its limits. Free of FastAPI: routes reach these through
projects/access.py's dependencies, the console and services call them directly.

The seed's rule: an unknown project or application is 404; an existing one on which the caller has
no rights, or too low a role, is 403. The checks, in order: the project exists (404); an API token
restricted to other projects may not reach it (403 `token_not_allowed`); the caller is a member
(403 `not_a_member`); the application exists (404); the token's scope includes what the route
does (403 `insufficient_scope`); the role suffices (403 `insufficient_role`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import and_, bindparam, select
from sqlalchemy.engine import RowMapping

from buildbay.applications.models import Application
from buildbay.applications.records import ApplicationRecord
from buildbay.auth.authentication import Principal
from buildbay.auth.enums import TokenScope
from buildbay.db.reads import Reads, RecordOf
from buildbay.distribution.visibility import Viewer, viewer_of
from buildbay.errors import Forbidden, NotFound
from buildbay.projects.enums import ProjectRole
from buildbay.projects.models import Project, ProjectMember
from buildbay.projects.records import ProjectRecord


@dataclass(frozen=True, slots=True)
class ProjectAccess:
    project: ProjectRecord
    role: ProjectRole
    caller: Principal


@dataclass(frozen=True, slots=True)
class ApplicationAccess:
    project: ProjectRecord
    application: ApplicationRecord
    role: ProjectRole
    caller: Principal


def tester_of(access: ApplicationAccess | ProjectAccess) -> Viewer | None:
    """The caller of `access` (to an application or a project), if they see only the builds
    distributed to them (a tester: distribution/visibility.py)."""
    user = access.caller.user
    return viewer_of(access.role, user.id, user.email)


def sees_addresses(role: ProjectRole) -> bool:
    """Whether a member of this role sees the e-mail addresses of the project's people in the
    console: developers and above, who add, invite and distribute by address. A tester sees
    their names only: testers are often strangers to one another (issue 36). The API's member
    list keeps the seed's shape, addresses included."""
    return role.includes(ProjectRole.DEVELOPER)


def only_a_tester(roles: Iterable[ProjectRole]) -> bool:
    """An account that is a member of some project and a tester in every one: someone invited to
    test, whom the console spares what they cannot use (a plan, a quota, API tokens). An account
    in no project is not: it may start one."""
    found = list(roles)
    return bool(found) and all(role is ProjectRole.TESTER for role in found)


_PROJECT = RecordOf(ProjectRecord, Project, "project_")
_APPLICATION = RecordOf(ApplicationRecord, Application, "app_")

# Built once: composing a statement (and its cache key) per request costs more than SQLite takes
# to run it, and every route that names a project runs one of these.
_MEMBERSHIP = (
    select(*_PROJECT.columns, ProjectMember.role.label("role"))
    .outerjoin(
        ProjectMember,
        and_(
            ProjectMember.project_id == Project.id,
            ProjectMember.user_id == bindparam("user_id"),
        ),
    )
    .where(Project.id == bindparam("project_id"))
)
# The application in the same query: an outer join, so that a missing application still tells
# the project's existence and the caller's membership apart.
_MEMBERSHIP_AND_APPLICATION = _MEMBERSHIP.add_columns(*_APPLICATION.columns).outerjoin(
    Application,
    and_(Application.project_id == Project.id, Application.id == bindparam("app_id")),
)


async def membership(
    reads: Reads, caller: Principal, project_id: str
) -> tuple[ProjectRecord, ProjectRole]:
    """The project and the caller's role in it: 404 if there is no such project, 403 if the
    caller is not a member."""
    params = {"user_id": caller.user.id, "project_id": project_id}
    row = _of_a_member(caller, await reads.first(_MEMBERSHIP, params))
    return _PROJECT.of(row), row["role"]


def _of_a_member(caller: Principal, row: RowMapping | None) -> RowMapping:
    """`row`, once it names a project of which the caller is a member and which the caller's
    token may reach."""
    if row is None:
        raise NotFound("No project with this id", code="project_not_found")
    caller.require_project(row["project_id"])
    if row["role"] is None:
        raise Forbidden("You are not a member of this project", code="not_a_member")
    return row


# What inviting someone into a project needs of an API token, on every path that invites: a
# token without a scope, as the invitation and tester-group endpoints declare (projects/
# access.py's ProjectAdmin, ProjectDeveloper); a distribution or a verify that names e-mails of
# non-members, open to builds:write tokens otherwise, checks it with `require_invite_rights`.
INVITE_SCOPE: TokenScope | None = None


def may_invite(caller: Principal) -> bool:
    scope = caller.scope
    return scope is None or (INVITE_SCOPE is not None and scope.includes(INVITE_SCOPE))


def require_invite_rights(caller: Principal, what: str) -> None:
    """403 `insufficient_scope` unless the caller's token may invite; `what` says what the
    request does that invites (e.g. "naming an e-mail that is not a member's")."""
    if not may_invite(caller):
        assert caller.scope is not None  # may_invite says so
        raise Forbidden(
            f"This API token has the {caller.scope.value} scope; {what} invites them into the "
            "project, which needs a token without a scope (as /invitations does)",
            code="insufficient_scope",
        )


def require_role(role: ProjectRole, needed: ProjectRole) -> None:
    if not role.includes(needed):
        raise Forbidden(
            f"This needs the {needed.value} role or higher; you are {role.value}",
            code="insufficient_role",
        )


async def project_of(
    reads: Reads,
    caller: Principal,
    project_id: str,
    needed: ProjectRole,
    scope: TokenScope | None = None,
) -> ProjectAccess:
    """The rules of `project_access`, for callers that are not routes (the web console), read
    through `reads` (a read-only request's, or a unit of work's). `scope`: what an API token
    must be allowed (None: only a token without a scope)."""
    project, role = await membership(reads, caller, project_id)
    caller.require_application(None)  # a trusted publisher's token reaches its application only
    caller.require_scope(scope)
    require_role(role, needed)
    return ProjectAccess(project=project, role=role, caller=caller)


async def application_of(
    reads: Reads,
    caller: Principal,
    project_id: str,
    app_id: str,
    needed: ProjectRole,
    scope: TokenScope | None = None,
    *,
    publisher_ok: bool = True,
) -> ApplicationAccess:
    """The rules of `application_access`, for callers that are not routes (the web console).
    `publisher_ok`: a trusted publisher's token may use the route on its own application (what
    uploading reads and writes), else it is refused like everywhere else."""
    # Members learn whether an application exists (404) before whether their role suffices
    # (403); strangers learn neither.
    params = {"user_id": caller.user.id, "project_id": project_id, "app_id": app_id}
    row = _of_a_member(caller, await reads.first(_MEMBERSHIP_AND_APPLICATION, params))
    if row["app_id"] is None:
        raise NotFound("No application with this id in the project", code="application_not_found")
    role = row["role"]
    caller.require_application(app_id if publisher_ok else None)
    caller.require_scope(scope)
    require_role(role, needed)
    return ApplicationAccess(
        project=_PROJECT.of(row), application=_APPLICATION.of(row), role=role, caller=caller
    )

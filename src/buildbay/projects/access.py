"""Authorization as route dependencies: every route that names a project or an application
depends on one of the aliases below, which run projects/authorization.py's rules on the request's
reads (read-only, or its unit of work's) and declare what the route needs.
"""

from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from fastapi import Depends, Path, Request

from buildbay.auth.dependencies import AuthenticatedOrPublisher
from buildbay.auth.enums import TokenScope
from buildbay.db.reads import Reads
from buildbay.deps import request_reads, request_session
from buildbay.projects.authorization import (
    ApplicationAccess,
    ProjectAccess,
    application_of,
    project_of,
)
from buildbay.projects.enums import ProjectRole


def _reads_of(request: Request, *, read_only: bool) -> Reads:
    """The request's read-only reads, or its unit of work's (where the route writes)."""
    return request_reads(request) if read_only else Reads.within(request_session(request))


def project_access(
    needed: ProjectRole, param: str = "id", *, read_only: bool, scope: TokenScope | None
) -> Callable[..., Awaitable[ProjectAccess]]:
    """The project a route names, checked for `needed` (and an API token for `scope`, None:
    only a token without a scope), read by the request's read-only reads (`read_only`: the
    route only reads) or in its unit of work."""

    async def dependency(
        request: Request,
        caller: AuthenticatedOrPublisher,
        project_id: Annotated[str, Path(alias=param)],
    ) -> ProjectAccess:
        reads = _reads_of(request, read_only=read_only)
        return await project_of(reads, caller, project_id, needed, scope)

    return dependency


def application_access(
    needed: ProjectRole,
    project_param: str = "id",
    *,
    read_only: bool,
    scope: TokenScope | None,
    publisher_ok: bool = True,
) -> Callable[..., Awaitable[ApplicationAccess]]:
    """As `project_access`, for an application of the project (`publisher_ok`: a trusted
    publisher's token of that application may use the route)."""

    async def dependency(
        request: Request,
        caller: AuthenticatedOrPublisher,
        project_id: Annotated[str, Path(alias=project_param)],
        app_id: Annotated[str, Path(alias="appId")],
    ) -> ApplicationAccess:
        reads = _reads_of(request, read_only=read_only)
        return await application_of(
            reads, caller, project_id, app_id, needed, scope, publisher_ok=publisher_ok
        )

    return dependency


_TESTER, _DEVELOPER, _ADMIN, _OWNER = (
    ProjectRole.TESTER,
    ProjectRole.DEVELOPER,
    ProjectRole.ADMIN,
    ProjectRole.OWNER,
)
# What an API token's scope must include: reading needs `read` (which every scope has); the
# builds' own writes need `builds:write`; the rest (projects, members, applications) needs a
# token without a scope.
_READ, _BUILDS_WRITE, _UNSCOPED = TokenScope.READ, TokenScope.BUILDS_WRITE, None


def _project(needed: ProjectRole, *, read_only: bool, scope: TokenScope | None) -> Any:
    return Depends(project_access(needed, read_only=read_only, scope=scope))


def _app(
    needed: ProjectRole,
    param: str = "id",
    *,
    read_only: bool,
    scope: TokenScope | None,
    publisher_ok: bool = True,
) -> Any:
    return Depends(
        application_access(
            needed, param, read_only=read_only, scope=scope, publisher_ok=publisher_ok
        )
    )


# Routes that only read: the records come from the request's read-only reads.
ProjectReader = Annotated[ProjectAccess, _project(_TESTER, read_only=True, scope=_READ)]
# What only developers and above may see (the project's testers' devices, its feedback inbox).
ProjectDeveloperReader = Annotated[ProjectAccess, _project(_DEVELOPER, read_only=True, scope=_READ)]
# What only admins may see (a project's invitations).
ProjectAdminReader = Annotated[ProjectAccess, _project(_ADMIN, read_only=True, scope=_READ)]
AppReader = Annotated[ApplicationAccess, _app(_TESTER, read_only=True, scope=_READ)]
# An application's settings that only admins see, with a token without a scope (its trusted
# publishers: a CI's upload token or a read token learns nothing of them).
AppAdminReader = Annotated[ApplicationAccess, _app(_ADMIN, read_only=True, scope=_UNSCOPED)]
# The builds endpoints name the project `{projectId}` (seed: /api/app-distribution/...).
BuildsReader = Annotated[ApplicationAccess, _app(_TESTER, "projectId", read_only=True, scope=_READ)]
# Who installed a build, on which device: for developers and above. Like a build's install links
# and its download (below), not for a trusted publisher's exchanged token (`publisher_ok`): it
# is upload-only, reading what uploading needs (its application, its builds) and no more, or
# whoever can run a job of the trusted repository would read the testers' addresses and
# devices and download every build.
BuildsDeveloperReader = Annotated[
    ApplicationAccess,
    _app(_DEVELOPER, "projectId", read_only=True, scope=_READ, publisher_ok=False),
]
# A build's install links (a shared one opens the build to whoever holds it).
InstallLinksReader = Annotated[
    ApplicationAccess, _app(_TESTER, "projectId", read_only=True, scope=_READ, publisher_ok=False)
]

# Routes that change something: the objects belong to the request's unit of work.
ProjectTester = Annotated[ProjectAccess, _project(_TESTER, read_only=False, scope=_UNSCOPED)]
# Tester groups: developers manage who tests.
ProjectDeveloper = Annotated[ProjectAccess, _project(_DEVELOPER, read_only=False, scope=_UNSCOPED)]
ProjectAdmin = Annotated[ProjectAccess, _project(_ADMIN, read_only=False, scope=_UNSCOPED)]
ProjectOwner = Annotated[ProjectAccess, _project(_OWNER, read_only=False, scope=_UNSCOPED)]
AppAdmin = Annotated[ApplicationAccess, _app(_ADMIN, read_only=False, scope=_UNSCOPED)]
# Release channels: part of publishing builds, so a builds:write token (CI) may change them.
AppDeveloper = Annotated[ApplicationAccess, _app(_DEVELOPER, read_only=False, scope=_BUILDS_WRITE)]
# A download (tester+, as reading): it writes who downloaded, so it is a unit of work.
BuildsDownloader = Annotated[
    ApplicationAccess, _app(_TESTER, "projectId", read_only=False, scope=_READ, publisher_ok=False)
]
# Uploading a build (its link, parts, verify, blockmap): what a trusted publisher's exchanged
# token (the `upload` scope) may do, and a builds:write token too.
BuildsUploader = Annotated[
    ApplicationAccess, _app(_DEVELOPER, "projectId", read_only=False, scope=TokenScope.UPLOAD)
]
# Builds and their install links (sharing a build is a developer's: issue 34).
BuildsDeveloper = Annotated[
    ApplicationAccess, _app(_DEVELOPER, "projectId", read_only=False, scope=_BUILDS_WRITE)
]

"""The console's "Install" of an .ipa on an iPhone or iPad: an install link, then its install
page, whose button hands the manifest to iOS. iOS fetches the manifest and the file itself,
without the console's cookies: only a signed link reaches it. A tester's is their own personal
link (from their mail, else a new one: it counts as theirs and works only while they may open
the build); a developer's, the build's shared link (the one it has, else a new one)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from buildbay.builds.dependencies import build_reads, install_links
from buildbay.builds.schemas import DEFAULT_HOURS
from buildbay.console.pages import ConsoleRoute, see_other, visit_application
from buildbay.db.reads import Reads
from buildbay.deps import get_context
from buildbay.projects.authorization import tester_of
from buildbay.projects.enums import ProjectRole

router = APIRouter(route_class=ConsoleRoute, include_in_schema=False)


@router.post("/projects/{project_id}/apps/{app_id}/builds/{build_id}/install")
async def install_build(request: Request, project_id: str, app_id: str, build_id: str) -> Response:
    visitor, db, access = await visit_application(request, project_id, app_id, ProjectRole.TESTER)
    reads = Reads.within(db)
    ctx = get_context(request)
    build = await build_reads(ctx, reads).get(access.application.id, build_id, tester_of(access))
    links = install_links(ctx, db)
    user = visitor.principal.user
    if tester_of(access) is None:
        link = await links.share(build, user, DEFAULT_HOURS)
    else:
        link = await links.own(build, user, DEFAULT_HOURS)
    return see_other(links.reads.url(link))

"""The console: a build's page for developers. What its file says about itself, its notes (to
edit), who uploaded it, its install links (to create with a lifetime, copy and revoke) and who
installed it; distributing it is console/distribution.py's. Also the build's icon, for every
page that lists builds."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from fastapi import APIRouter, Request, Response
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.audit.record import actor_of
from buildbay.builds.dependencies import (
    build_reads,
    build_service,
    install_link_reads,
    install_links,
)
from buildbay.builds.duplicates import ready_build_of_version, version_code_of
from buildbay.builds.history import history_of
from buildbay.builds.history import said as said_in_history
from buildbay.builds.install import (
    InstallLinkReads,
    InstallLinkRecord,
    LinkOwner,
    ListedLink,
)
from buildbay.builds.reads import ICON_CACHE
from buildbay.builds.records import BuildRecord
from buildbay.builds.schemas import (
    DEFAULT_HOURS,
    MAX_NOTES_LENGTH,
    BuildUpdate,
    version_label,
)
from buildbay.builds.service import human_size
from buildbay.builds.source import source_links, web_link
from buildbay.console.build_devices import build_devices
from buildbay.console.pages import (
    ConsoleRoute,
    FormError,
    can,
    form_fields,
    page,
    parse_form,
    see_other,
    visit,
    visit_application,
)
from buildbay.console.session import Visitor
from buildbay.console.tester_feedback import render_tester_build
from buildbay.db.reads import Reads
from buildbay.deps import get_context
from buildbay.distribution.groups import groups_page
from buildbay.distribution.installs import installs_of
from buildbay.distribution.reach import reach_of
from buildbay.feedback.reads import new_feedback_counts
from buildbay.numbers import whole_number
from buildbay.projects.authorization import ApplicationAccess, application_of, tester_of
from buildbay.projects.enums import ProjectRole
from buildbay.projects.reads import members
from buildbay.updates.check import release_of

router = APIRouter(route_class=ConsoleRoute, include_in_schema=False)

# The lifetimes offered for a new install link, in hours, with their words.
LIFETIMES = [(24, "1 day"), (72, "3 days"), (DEFAULT_HOURS, "7 days"), (14 * 24, "14 days"),
             (30 * 24, "30 days"), (90 * 24, "90 days")]  # fmt: skip


def build_path(project_id: str, app_id: str, build_id: str) -> str:
    return f"/projects/{project_id}/apps/{app_id}/builds/{build_id}"


def _date(value: object) -> str | None:
    """A provisioning profile's expiry (`2027-01-31T12:00:00Z`) as the pages show dates."""
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value).strftime("%d %b %Y, %H:%M")
    except ValueError:
        return value


def file_facts(build: BuildRecord) -> Iterator[tuple[str, str]]:
    """What the build's file says about itself, as (label, value) for the page, in the order
    people look for them; what the file does not say is left out."""
    data: dict[str, Any] = build.metadata_ or {}
    profile = data.get("provisioning") if isinstance(data.get("provisioning"), dict) else None
    facts: list[tuple[str, object]] = [
        ("App name", data.get("appName")),
        ("Package name", data.get("packageName")),
        ("Bundle id", data.get("bundleId")),
        ("Version", data.get("versionName") or data.get("shortVersion")),
        ("Version code", data.get("versionCode")),
        ("Build number", data.get("buildNumber")),
        ("Minimum Android API level", data.get("minSdk")),
        ("Target Android API level", data.get("targetSdk")),
        (
            "Minimum iOS" if build.file_name.lower().endswith(".ipa") else "Minimum OS version",
            data.get("minOs"),
        ),
        # a desktop build's own
        ("Package", data.get("package")),
        ("Package identifier", data.get("packageId")),
        ("Identity name", data.get("identityName")),
        ("Publisher", data.get("publisher") or data.get("companyName")),
        ("Architecture", build.architecture or data.get("arch")),
        ("Description", data.get("description")),
        ("Signing certificate (SHA-256)", data.get("signingCertificateSha256")),
        ("Provisioning profile", profile and profile.get("type")),
        ("Profile expires", profile and _date(profile.get("expiresAt"))),
        ("Devices in the profile", profile and profile.get("deviceCount")),
    ]
    for label, value in facts:
        if value is not None and value != "":
            yield label, str(value)


@dataclass(frozen=True, slots=True)
class LinkRow:
    link: InstallLinkRecord
    url: str
    state: str  # live, expired or revoked
    owner: LinkOwner | None  # a personal link's person; None: shared
    creator: str | None  # a shared link's maker, by name; None: the server


def _link_rows(
    links: InstallLinkReads, found: list[ListedLink], names: dict[str, str]
) -> list[LinkRow]:
    def state(link: InstallLinkRecord) -> str:
        if link.revoked_at is not None:
            return "revoked"
        return "expired" if link.expires_at <= links.now else "live"

    def creator(link: InstallLinkRecord) -> str | None:
        if link.created_by is None:
            return None
        return names.get(link.created_by, "a former member")

    return [
        LinkRow(row.link, links.url(row.link), state(row.link), row.owner, creator(row.link))
        for row in found
    ]


@dataclass(frozen=True, slots=True)
class HistoryRow:
    at: datetime
    who: str | None  # by name; None: the server
    what: str


async def _history(reads: Reads, build_id: str, names: dict[str, str]) -> list[HistoryRow]:
    """The build's history, newest first, each event said in words with who did it."""
    return [
        HistoryRow(
            event.at,
            None if event.actor_id is None else names.get(event.actor_id, "a former member"),
            said_in_history(event),
        )
        for event in await history_of(reads, build_id)
    ]


@router.get("/projects/{project_id}/apps/{app_id}/builds/{build_id}")
async def build_page(request: Request, project_id: str, app_id: str, build_id: str) -> Response:
    visitor, db = await visit(request)
    access = await application_of(
        Reads.within(db), visitor.principal, project_id, app_id, ProjectRole.TESTER
    )
    if tester_of(access) is not None:  # a tester's page: the build, and their feedback form
        return await render_tester_build(request, visitor, db, access, build_id)
    return await render_build(request, visitor, db, project_id, app_id, build_id, access=access)


async def render_build(
    request: Request, visitor: Visitor, db: AsyncSession, project_id: str, app_id: str,
    build_id: str, failed: str | None = None, values: dict[str, Any] | None = None,
    errors: dict[str, str] | None = None, status_code: int = 200,
    access: ApplicationAccess | None = None,
) -> Response:  # fmt: skip
    """The page; after a refused form, `failed` names it ("distribute", "notes", "link") and
    its fields show `values` and `errors`. `access`: the visitor's, a developer's or more, if
    the caller already has it."""
    reads = Reads.within(db)
    ctx = get_context(request)
    if access is None:
        access = await application_of(
            reads, visitor.principal, project_id, app_id, ProjectRole.DEVELOPER
        )
    build = await build_reads(ctx, reads).get(access.application.id, build_id)
    groups, _ = await groups_page(reads, access.project, 100, None)
    links = install_link_reads(ctx, reads)
    team = await members(reads, access.project.id)
    uploader = next((m for m in team if m.user_id == build.uploaded_by), None)
    names = {m.user_id: m.name or m.email for m in team}
    code = version_code_of(build.metadata_)
    same_version = None  # a ready build of the same version code with other bytes (a warning)
    if code is not None and build.sha256 is not None:
        same_version = await ready_build_of_version(
            reads, access.application.id, code, build.sha256, other_than=build.id
        )
    return page(
        "console/build.html", visitor, status_code, project=access.project,
        application=access.application, build=build, can=can(access.role), groups=groups,
        report=await installs_of(reads, build), version=version_label(build.metadata_),
        size=human_size(build.file_size), facts=list(file_facts(build)), uploader=uploader,
        links=_link_rows(links, await links.of_build(build), names), lifetimes=LIFETIMES,
        default_hours=DEFAULT_HOURS, fresh_link=request.query_params.get("link"),
        max_notes=MAX_NOTES_LENGTH,
        failed=failed, values=values or {}, errors=errors or {},
        release=await release_of(reads, build.id), same_version=same_version,
        history=await _history(reads, build.id, names),
        same_version_label=same_version and version_label(same_version.metadata_),
        version_code=code,
        reach=await reach_of(reads, build, ctx.clock.now()),
        devices=await build_devices(reads, build),
        new_feedback=(await new_feedback_counts(reads, [build.id])).get(build.id, 0),
        source=build.source, source_links=source_links(build.source),
        ci_run_link=web_link(build.source.ci_run_url),
    )  # fmt: skip


@router.get("/projects/{project_id}/apps/{app_id}/builds/{build_id}/icon")
async def build_icon(request: Request, project_id: str, app_id: str, build_id: str) -> Response:
    """The app icon the file carries (tester+, of a build given to them), as the API's."""
    _, db, access = await visit_application(request, project_id, app_id, ProjectRole.TESTER)
    reads = Reads.within(db)
    builds = build_reads(get_context(request), reads)
    build = await builds.get(access.application.id, build_id, tester_of(access))
    return Response(await builds.icon(build), media_type="image/png", headers=ICON_CACHE)


@router.post("/projects/{project_id}/apps/{app_id}/builds/{build_id}/notes")
async def save_notes(request: Request, project_id: str, app_id: str, build_id: str) -> Response:
    visitor, db, access = await visit_application(
        request, project_id, app_id, ProjectRole.DEVELOPER
    )
    fields = await form_fields(request)
    try:
        body = parse_form(BuildUpdate, {"notes": fields.get("notes", "")})
    except FormError:
        errors = {"notes": f"Notes are at most {MAX_NOTES_LENGTH:,} characters."}
        return await render_build(request, visitor, db, project_id, app_id, build_id, "notes",
                                  fields, errors, 422)  # fmt: skip
    changes = body.model_dump(exclude_unset=True)
    await build_service(get_context(request), db).update(access.application, build_id, changes)
    visitor.tell("Notes saved.")
    return see_other(f"{build_path(project_id, app_id, build_id)}#notes")


@router.post("/projects/{project_id}/apps/{app_id}/builds/{build_id}/install-links")
async def create_link(request: Request, project_id: str, app_id: str, build_id: str) -> Response:
    """A new install link of the lifetime chosen (the application page's button shares the
    build's live link instead)."""
    visitor, db, access = await visit_application(
        request, project_id, app_id, ProjectRole.DEVELOPER
    )
    reads = Reads.within(db)
    fields = await form_fields(request)
    hours = whole_number(fields.get("hours", "").strip())
    if hours not in dict(LIFETIMES):  # each within the API's bounds (InstallLinkRequest)
        errors = {"hours": "Choose one of the lifetimes listed."}
        return await render_build(request, visitor, db, project_id, app_id, build_id, "link",
                                  fields, errors, 422)  # fmt: skip
    ctx = get_context(request)
    build = await build_reads(ctx, reads).get(access.application.id, build_id)
    link = await install_links(ctx, db).create(build, visitor.principal.user, hours)
    return see_other(f"{build_path(project_id, app_id, build_id)}?link={link.id}#install-links")


@router.post(
    "/projects/{project_id}/apps/{app_id}/builds/{build_id}/install-links/{link_id}/revoke"
)
async def revoke_link(
    request: Request, project_id: str, app_id: str, build_id: str, link_id: str
) -> Response:
    visitor, db, access = await visit_application(
        request, project_id, app_id, ProjectRole.DEVELOPER
    )
    reads = Reads.within(db)
    ctx = get_context(request)
    build = await build_reads(ctx, reads).get(access.application.id, build_id)
    links = install_links(ctx, db)
    link = await links.reads.find(build, link_id)
    await links.revoke(link, build, by=actor_of(access))
    visitor.tell("Install link revoked: its page now says so.")
    return see_other(f"{build_path(project_id, app_id, build_id)}#install-links")

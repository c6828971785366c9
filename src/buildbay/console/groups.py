"""The console: a project's tester groups (make one, add testers by e-mail, remove them, delete
it), through the same service as the API."""

from __future__ import annotations

import re
from contextlib import suppress
from dataclasses import replace

import segno
from fastapi import APIRouter, Request, Response
from markupsafe import Markup
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.console.pages import (
    ConsoleRoute,
    FormError,
    can,
    form_fields,
    now,
    page,
    parse_form,
    said,
    see_other,
    sessions,
    visit,
)
from buildbay.console.session import Visitor
from buildbay.console.shown_once import Shown, take
from buildbay.db.reads import Reads
from buildbay.deps import get_context
from buildbay.distribution.dependencies import group_service, join_links
from buildbay.distribution.groups import groups_page, invited_to_groups, testers_of
from buildbay.distribution.schemas import GroupCreate, TestersAdd
from buildbay.errors import BuildbayError, NotFound
from buildbay.invitations.caps import not_invited_sentences
from buildbay.projects.authorization import project_of, sees_addresses
from buildbay.projects.enums import ProjectRole
from buildbay.words import counted

router = APIRouter(route_class=ConsoleRoute, include_in_schema=False)

_SEPARATORS = re.compile(r"[\s,;]+")


EMAILS_RULE = "Enter one or more e-mail addresses, one a line or separated by commas."


def emails_of(text: str) -> list[str]:
    """The e-mails of a text box: one a line, or separated by commas or spaces."""
    return [e for e in _SEPARATORS.split(text) if e]


def join_qr_svg(url: str) -> Markup:
    """A join link as a QR code, drawn as the install page draws its own."""
    qr = segno.make(url, error="m")
    return Markup(qr.svg_inline(scale=4, border=2, title=f"QR code of {url}"))  # noqa: S704


def groups_path(project_id: str, group_id: str | None = None) -> str:
    """The project's groups page, at the group's section if one is named."""
    return f"/projects/{project_id}/groups" + (f"#{group_id}" if group_id else "")


@router.get("/projects/{project_id}/groups")
async def groups(request: Request, project_id: str) -> Response:
    visitor, db = await visit(request)
    return await _render(request, visitor, db, project_id)


async def _render(
    request: Request, visitor: Visitor, db: AsyncSession, project_id: str,
    failed: str | None = None, errors: dict[str, str] | None = None,
    values: dict[str, str] | None = None, status_code: int = 200,
) -> Response:  # fmt: skip
    reads = Reads.within(db)
    access = await project_of(reads, visitor.principal, project_id, ProjectRole.TESTER)
    found, _ = await groups_page(reads, access.project, 100, None)
    testers = {g.id: await testers_of(reads, access.project, g.id) for g in found}
    invited = await invited_to_groups(reads, access.project, now(request))
    addresses = sees_addresses(access.role)
    if not addresses:  # a tester sees the others' names, never their addresses
        testers = {key: [replace(t, email="") for t in rows] for key, rows in testers.items()}
        invited = {key: [""] * len(emails) for key, emails in invited.items()}
    links, shown_link, shown_qr = {}, None, None
    if access.role.includes(ProjectRole.DEVELOPER):
        service = join_links(get_context(request), db)
        for group in found:
            if not group.builtin:
                with suppress(NotFound):
                    links[group.id] = await service.live(access.project, group.id)
        kept = await take(request, sessions(request), visitor, db, now(request), Shown.JOIN_LINK)
        if kept is not None:
            shown_link = {"group": kept[0], "url": kept[1]}
            shown_qr = join_qr_svg(kept[1])
    return page(
        "console/groups.html", visitor, status_code, project=access.project, role=access.role,
        can=can(access.role), groups=found, testers=testers, invited=invited, failed=failed,
        addresses=addresses, links=links, shown_link=shown_link, shown_qr=shown_qr,
        errors=errors or {}, values=values or {},
    )  # fmt: skip


render_groups = _render


@router.post("/projects/{project_id}/groups")
async def create_group(request: Request, project_id: str) -> Response:
    visitor, db = await visit(request)
    access = await project_of(
        Reads.within(db), visitor.principal, project_id, ProjectRole.DEVELOPER
    )
    fields = await form_fields(request)
    try:
        body = parse_form(GroupCreate, {"name": fields.get("name", "")})
        assert isinstance(body, GroupCreate)
        async with db.begin_nested():
            group = await group_service(get_context(request), db).create(access.project, body.name)
    except FormError as exc:
        errors = {"name": exc.by_field.get("name", "Enter a name.")}
        return await _render(request, visitor, db, project_id, "new", errors, fields, 422)
    except BuildbayError as exc:
        if exc.status >= 500:
            raise
        return await _render(request, visitor, db, project_id, "new", {"name": said(exc)},
                             fields, exc.status)  # fmt: skip
    visitor.tell(f"Group {group.name} created.")
    return see_other(groups_path(project_id, group.id))


@router.post("/projects/{project_id}/groups/{group_id}/testers")
async def add_testers(request: Request, project_id: str, group_id: str) -> Response:
    visitor, db = await visit(request)
    access = await project_of(
        Reads.within(db), visitor.principal, project_id, ProjectRole.DEVELOPER
    )
    fields = await form_fields(request)
    service = group_service(get_context(request), db)
    try:
        body = parse_form(TestersAdd, {"emails": emails_of(fields.get("emails", ""))})
        assert isinstance(body, TestersAdd)
        async with db.begin_nested():
            added = await service.add_testers(access, group_id, [str(e) for e in body.emails])
    except FormError as exc:
        # An address that is valid but cannot be mailed is named, with why; else the rule.
        named = exc.by_field.get("emails", "")
        error = named if named.startswith("The e-mail address ") else EMAILS_RULE
        return await _render(request, visitor, db, project_id, group_id, {"emails": error},
                             fields, 422)  # fmt: skip
    except BuildbayError as exc:
        if exc.status >= 500 or exc.status == 404:
            raise
        return await _render(request, visitor, db, project_id, group_id,
                             {"emails": said(exc)}, fields, exc.status)  # fmt: skip
    parts = []
    if added.testers:
        parts.append(f"{counted(len(added.testers), 'tester')} in the group")
    if added.invited:
        parts.append(f"invited {', '.join(added.invited)}; they join the group when they accept")
    refused = added.admission.refused
    notice = (", ".join(parts) or ("Nothing changed" if not refused else "No one added")) + "."
    if refused:
        notice += " " + not_invited_sentences(refused)
    visitor.tell(notice[0].upper() + notice[1:])
    return see_other(groups_path(project_id, group_id))


@router.post("/projects/{project_id}/groups/{group_id}/testers/{user_id}/remove")
async def remove_tester(request: Request, project_id: str, group_id: str, user_id: str) -> Response:
    visitor, db = await visit(request)
    access = await project_of(
        Reads.within(db), visitor.principal, project_id, ProjectRole.DEVELOPER
    )
    await group_service(get_context(request), db).remove_tester(access.project, group_id, user_id)
    return see_other(groups_path(project_id, group_id))


@router.post("/projects/{project_id}/groups/{group_id}/delete")
async def delete_group(request: Request, project_id: str, group_id: str) -> Response:
    visitor, db = await visit(request)
    access = await project_of(
        Reads.within(db), visitor.principal, project_id, ProjectRole.DEVELOPER
    )
    await group_service(get_context(request), db).delete(access.project, group_id)
    visitor.tell("Group deleted.")
    return see_other(groups_path(project_id))

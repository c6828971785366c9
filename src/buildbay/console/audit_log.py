"""The console: a project's audit log (admins) and one's own account's, each a page of entries
as sentences, newest first, with filters (a GET form: the address is the filter, to bookmark or
share), an "Older" link to the next keyset page, and the filtered log to download as NDJSON
(the API's export, through the console's session)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Request, Response
from fastapi.responses import StreamingResponse

from buildbay.audit.export import NDJSON, download_headers, ndjson_lines
from buildbay.audit.filters import ACTIONS, audit_filter_of
from buildbay.audit.reads import AuditScope, entries_page, every_entry
from buildbay.audit.sentences import ACTION_WORDS, sentence
from buildbay.console.pages import ConsoleRoute, page, search_and_cursor, visit
from buildbay.console.session import Visitor
from buildbay.db.reads import Reads
from buildbay.deps import get_context
from buildbay.errors import ValidationFailed
from buildbay.projects.authorization import project_of
from buildbay.projects.enums import ProjectRole

router = APIRouter(route_class=ConsoleRoute, include_in_schema=False)
PAGE_SIZE = 50
FILTERS = ("action", "actor", "since", "until")


@router.get("/projects/{project_id}/audit-log")
async def project_audit_log(request: Request, project_id: str) -> Response:
    visitor, db = await visit(request)
    access = await project_of(Reads.within(db), visitor.principal, project_id, ProjectRole.ADMIN)
    base = f"/projects/{project_id}/audit-log"
    scope = AuditScope(project_id=project_id)
    return await _log_page(request, visitor, Reads.within(db), scope, base, project=access.project)


@router.get("/account/audit-log")
async def account_audit_log(request: Request) -> Response:
    visitor, db = await visit(request)
    scope = AuditScope(user_id=visitor.principal.user.id)
    return await _log_page(request, visitor, Reads.within(db), scope, "/account/audit-log")


@router.get("/projects/{project_id}/audit-log/export")
async def project_export(request: Request, project_id: str) -> Response:
    visitor, db = await visit(request)
    await project_of(Reads.within(db), visitor.principal, project_id, ProjectRole.ADMIN)
    return await _export(request, Reads.within(db), AuditScope(project_id=project_id), project_id)


@router.get("/account/audit-log/export")
async def account_export(request: Request) -> Response:
    visitor, db = await visit(request)
    scope = AuditScope(user_id=visitor.principal.user.id)
    return await _export(request, Reads.within(db), scope, "account")


async def _log_page(
    request: Request,
    visitor: Visitor,
    reads: Reads,
    scope: AuditScope,
    base: str,
    project: Any = None,
) -> Response:
    query = request.query_params
    values = {name: query.get(name, "")[:320] for name in FILTERS}
    _, after_id = search_and_cursor(request, 0, pages_of="the audit log", start=base)
    try:
        only = audit_filter_of(query)
    except ValidationFailed as refused:
        errors = {e.field: f"{e.message[:1].upper()}{e.message[1:]}." for e in refused.errors or []}
        return _page(visitor, base, project, values, [], None, errors, 422)
    rows, next_cursor = await entries_page(reads, scope, only, PAGE_SIZE, after_id)
    older = None
    if next_cursor is not None:
        older = f"{base}?{urlencode({**_set(values), 'cursor': next_cursor})}"
    shown = [{"sentence": sentence(row), **row} for row in rows]
    return _page(visitor, base, project, values, shown, older, {}, 200)


def _page(
    visitor: Visitor, base: str, project: Any, values: dict[str, str],
    shown: list[dict[str, Any]], older: str | None, errors: dict[str, str], status: int,
) -> Response:  # fmt: skip
    query = urlencode(_set(values))
    export = f"{base}/export" + (f"?{query}" if query else "")
    return page("console/audit_log.html", visitor, status, project=project, entries=shown,
                values=values, errors=errors, older=older, export=export,
                actions=[(a, ACTION_WORDS.get(a, a)) for a in ACTIONS],
                filtered=bool(query), base=base)  # fmt: skip


def _set(values: dict[str, str]) -> dict[str, str]:
    return {name: value for name, value in values.items() if value}


async def _export(request: Request, reads: Reads, scope: AuditScope, stem: str) -> Response:
    only = audit_filter_of(request.query_params)  # a bad filter: the console's 422 page
    batches = await every_entry(reads, get_context(request).read_engine, scope, only)
    return StreamingResponse(
        ndjson_lines(batches), media_type=NDJSON, headers=download_headers(stem)
    )

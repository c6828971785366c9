"""The audit log's two endpoints: a project's (admin+) and one's own account's. Reading only:
no endpoint changes or deletes an entry."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from buildbay.audit.export import NDJSON, download_headers, ndjson_lines
from buildbay.audit.filters import FILTER_QUERY, audit_filter_of, wants_ndjson
from buildbay.audit.reads import AuditScope, entries_page, every_entry
from buildbay.audit.schemas import AuditLog, entry_schema
from buildbay.auth.dependencies import CurrentUser
from buildbay.deps import Context, Page, ReadsDep, TransactionRoute
from buildbay.problems import problem_responses
from buildbay.projects.access import ProjectAdminReader
from buildbay.schemas import PAGE_QUERY

router = APIRouter(tags=["audit log"], route_class=TransactionRoute)

_QUERY = {"parameters": [*PAGE_QUERY["parameters"], *FILTER_QUERY]}


def _responses(what: str) -> dict[int | str, dict[str, Any]]:
    return {
        200: {
            "description": f"A page of {what}, newest first; with `?format=ndjson` every entry "
            "of the filtered log, one JSON object a line, as a file to save",
            "content": {NDJSON: {"schema": {"type": "string"}}},
        }
    }


@router.get(
    "/api/projects/{id}/audit-log",
    response_model=AuditLog,
    responses={
        **_responses("the project's audit log"),
        **problem_responses(401, 403, 404, 422, 429),
    },
    summary="The project's audit log: who changed what, newest first (admin+)",
    openapi_extra=_QUERY,
)
async def project_audit_log(
    request: Request, access: ProjectAdminReader, reads: ReadsDep, page: Page, ctx: Context
) -> Any:
    scope = AuditScope(project_id=access.project.id)
    return await _answer(request, scope, reads, page.limit, page.after_id, ctx, access.project.id)


@router.get(
    "/api/account/audit-log",
    response_model=AuditLog,
    responses={**_responses("your account's audit log"), **problem_responses(401, 403, 422, 429)},
    summary="Your account's audit log: what you did, and what was done about your account "
    "(a failed sign-in with your e-mail, a role given to you), newest first",
    openapi_extra=_QUERY,
    tags=["account"],
)
async def account_audit_log(
    request: Request, caller: CurrentUser, reads: ReadsDep, page: Page, ctx: Context
) -> Any:
    scope = AuditScope(user_id=caller.user.id)
    return await _answer(request, scope, reads, page.limit, page.after_id, ctx, "account")


async def _answer(
    request: Request,
    scope: AuditScope,
    reads: ReadsDep,
    limit: int,
    after_id: str | None,
    ctx: Context,
    file_stem: str,
) -> AuditLog | StreamingResponse:
    query = request.query_params
    only = audit_filter_of(query)
    if wants_ndjson(query):
        batches = await every_entry(reads, ctx.read_engine, scope, only)
        return StreamingResponse(
            ndjson_lines(batches), media_type=NDJSON, headers=download_headers(file_stem)
        )
    rows, next_cursor = await entries_page(reads, scope, only, limit, after_id)
    return AuditLog(entries=[entry_schema(row) for row in rows], next_cursor=next_cursor)

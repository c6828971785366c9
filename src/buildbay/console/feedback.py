"""The console: the team's feedback inbox (issue 38), for developers and above. A project's
inbox and an application's (the same page, its application fixed by the address), newest first
in keyset pages, filtered by a GET form (application, build, status, category, words); each
feedback's page with its screenshots beside its build, device and context, its triage (status,
assignee) and the team's replies, each mailed to its tester. j and k move through the inbox's
order (static/console.js), on both pages.

The same reads and services as the API's (feedback/reads.py, feedback/triage.py): a tester is
refused here as there (403), a stranger learns nothing (404)."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any, TypeVar
from urllib.parse import urlencode

from fastapi import APIRouter, Request, Response
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.applications.reads import applications_page
from buildbay.console.build_page import build_path
from buildbay.console.pages import (
    ConsoleRoute,
    FormError,
    domain_field_errors,
    form_fields,
    page,
    parse_form,
    search_and_cursor,
    see_other,
    visit,
)
from buildbay.console.session import Visitor
from buildbay.db.reads import Reads
from buildbay.deps import get_context
from buildbay.errors import ValidationFailed
from buildbay.feedback.dependencies import page_feedback_reads, triage_service
from buildbay.feedback.enums import FeedbackCategory, FeedbackStatus
from buildbay.feedback.links import ScreenshotLinks
from buildbay.feedback.reads import FeedbackQuery, FeedbackViewer, InboxItem
from buildbay.feedback.records import ScreenshotRecord
from buildbay.feedback.team_schemas import (
    MAX_COMMENT_LENGTH,
    FeedbackCommentCreate,
    FeedbackUpdate,
)
from buildbay.projects.authorization import ProjectAccess, application_of, project_of
from buildbay.projects.enums import ProjectRole
from buildbay.projects.reads import members

router = APIRouter(route_class=ConsoleRoute, include_in_schema=False)

FEEDBACK_PER_PAGE = 25
MAX_SEARCH = 200  # as the API's `q`
MAX_ID = 64
COMMENTS_SHOWN = 100
EXCERPT = 160  # characters of a feedback's text in its inbox row
THUMBNAIL_HEIGHT = 56  # CSS pixels
STATUSES = list(FeedbackStatus)
CATEGORIES = list(FeedbackCategory)
STATUS_WORDS = {FeedbackStatus.NEW: "New", FeedbackStatus.TRIAGED: "Triaged",
                FeedbackStatus.RESOLVED: "Resolved",
                FeedbackStatus.WONT_FIX: "Won't fix"}  # fmt: skip


def inbox_path(project_id: str, app_id: str | None = None) -> str:
    if app_id is not None:
        return f"/projects/{project_id}/apps/{app_id}/feedback"
    return f"/projects/{project_id}/feedback"


def feedback_path(project_id: str, feedback_id: str) -> str:
    return f"/projects/{project_id}/feedback/{feedback_id}"


@dataclass(frozen=True, slots=True)
class Filters:
    """What an inbox shows, from its address: `?application=&build=&status=&category=&q=`
    and the page's `?cursor=`. A feedback's page carries them on, to move through the same
    list."""

    application: str | None = None
    build: str | None = None
    status: FeedbackStatus | None = None
    category: FeedbackCategory | None = None
    search: str = ""
    after_id: str | None = None

    def query(self, project_id: str, limit: int = FEEDBACK_PER_PAGE) -> FeedbackQuery:
        return FeedbackQuery(
            project_id, limit, self.after_id, self.application, self.build, self.status,
            self.category, self.search or None,
        )  # fmt: skip

    def params(self, *, cursor: str | None = None, fixed_application: bool = False,
               **changes: Any) -> str:  # fmt: skip
        """The query string of these filters (`changes` replacing some), with `cursor`; the
        application left out where the address names it (`fixed_application`)."""
        shown = replace(self, **changes) if changes else self
        wanted = {
            "application": None if fixed_application else shown.application,
            "build": shown.build,
            "status": shown.status.value if shown.status else None,
            "category": shown.category.value if shown.category else None,
            "q": shown.search,
            "cursor": cursor,
        }
        return urlencode({k: v for k, v in wanted.items() if v})

    @property
    def narrowed(self) -> bool:
        """Whether anything but the application narrows the list."""
        return bool(self.build or self.status or self.category or self.search)


Choice = TypeVar("Choice", FeedbackStatus, FeedbackCategory)


def _choice(kind: type[Choice], value: str | None, words: str) -> Choice | None:
    if not value:
        return None
    try:
        return kind(value)
    except ValueError:
        raise ValidationFailed(
            f"This address asks for {words} the inbox does not have. Choose one from the list."
        ) from None


def _an_id(value: str | None) -> str | None:
    value = (value or "").strip()
    if not value:
        return None
    if len(value) > MAX_ID or not value.isascii() or not value.replace("_", "").isalnum():
        raise ValidationFailed(
            "This address names an application or a build the console did not give out. Start "
            "again from the inbox."
        )
    return value


def filters_of(request: Request, app_id: str | None = None) -> Filters:
    """The filters the address asks for (`app_id`: the application the address itself names)."""
    query = request.query_params
    search, after_id = search_and_cursor(
        request, MAX_SEARCH, pages_of="feedback", start="the inbox"
    )
    return Filters(
        application=app_id or _an_id(query.get("application")),
        build=_an_id(query.get("build")),
        status=_choice(FeedbackStatus, query.get("status"), "a status"),
        category=_choice(FeedbackCategory, query.get("category"), "a category"),
        search=search,
        after_id=after_id,
    )


@dataclass(frozen=True, slots=True)
class Shot:
    """A screenshot as a page shows it: its signed address, its size at the thumbnail's
    height."""

    record: ScreenshotRecord
    url: str

    @property
    def thumbnail_width(self) -> int:
        return max(1, round(self.record.width * THUMBNAIL_HEIGHT / max(1, self.record.height)))


@dataclass(frozen=True, slots=True)
class Row:
    item: InboxItem
    excerpt: str
    shots: list[Shot]
    reporter: str


def _excerpt(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= EXCERPT else flat[:EXCERPT].rstrip() + "…"


def _row(item: InboxItem, links: ScreenshotLinks, now: Any) -> Row:
    shots = [Shot(s, links.short_lived(s.id, now)) for s in item.screenshots]
    tester = item.tester
    reporter = (tester.name or tester.email) if tester else item.feedback.reporter_email
    return Row(item, _excerpt(item.feedback.text), shots, reporter)


async def _team(
    db: AsyncSession, visitor: Visitor, project_id: str, app_id: str | None
) -> tuple[ProjectAccess, Any]:
    """The visitor's access to the project (developer+), and to the application if the
    address names one (404 for an application the project does not have)."""
    reads = Reads.within(db)
    if app_id is not None:
        app_access = await application_of(
            reads, visitor.principal, project_id, app_id, ProjectRole.DEVELOPER
        )
        access = ProjectAccess(app_access.project, app_access.role, app_access.caller)
        return access, app_access.application
    access = await project_of(reads, visitor.principal, project_id, ProjectRole.DEVELOPER)
    return access, None


@router.get("/projects/{project_id}/feedback")
async def project_inbox(request: Request, project_id: str) -> Response:
    return await _inbox(request, project_id, None)


@router.get("/projects/{project_id}/apps/{app_id}/feedback")
async def application_inbox(request: Request, project_id: str, app_id: str) -> Response:
    return await _inbox(request, project_id, app_id)


async def _inbox(request: Request, project_id: str, app_id: str | None) -> Response:
    visitor, db = await visit(request)
    access, application = await _team(db, visitor, project_id, app_id)
    shown = filters_of(request, app_id)
    ctx = get_context(request)
    reads = Reads.within(db)
    feedback = page_feedback_reads(ctx, reads)
    query = shown.query(access.project.id)
    found, next_cursor = await feedback.page(query)
    counts = await feedback.status_counts(query)
    applications: list[Any] = []
    if application is None:
        applications, _ = await applications_page(reads, access.project.id, 100, None, None)
    base = inbox_path(project_id, app_id)
    fixed = app_id is not None
    return page(
        "console/feedback_inbox.html", visitor, project=access.project, application=application,
        applications=applications, shown=shown, base=base, fixed=fixed,
        rows=[_row(item, feedback.links, feedback.now) for item in found],
        counts=counts, total=sum(counts.values()), statuses=STATUSES, categories=CATEGORIES,
        status_words=STATUS_WORDS, thumbnail_height=THUMBNAIL_HEIGHT,
        next_page=shown.params(cursor=next_cursor, fixed_application=fixed)
        if next_cursor else None,
        first_page=shown.params(fixed_application=fixed) if shown.after_id else None,
        chip=lambda status: shown.params(fixed_application=fixed, status=status,
                                         after_id=None),
        carried=shown.params(after_id=None),
        build_version=next((r.build_version for r in found), None) if shown.build else None,
        max_search=MAX_SEARCH,
    )  # fmt: skip


@router.get("/projects/{project_id}/feedback/{feedback_id}")
async def feedback_page(request: Request, project_id: str, feedback_id: str) -> Response:
    visitor, db = await visit(request)
    return await _render_feedback(request, visitor, db, project_id, feedback_id)


def context_facts(context: dict[str, Any] | None) -> list[tuple[str, str]]:
    """What the device said of itself in one line each: the context's top-level values that
    are not lists or objects (those are in its JSON, shown beside)."""
    facts = []
    for key, value in (context or {}).items():
        if isinstance(value, dict | list):
            continue
        shown = json.dumps(value) if value is None or isinstance(value, bool) else str(value)
        facts.append((str(key), shown))
    return facts


async def _render_feedback(
    request: Request, visitor: Visitor, db: AsyncSession, project_id: str, feedback_id: str,
    *, failed: str | None = None, values: dict[str, str] | None = None,
    errors: dict[str, str] | None = None, status_code: int = 200,
) -> Response:  # fmt: skip
    """A feedback's page; after a refused form, `failed` names it ("triage", "reply") and its
    fields show `values` and `errors`."""
    access, _ = await _team(db, visitor, project_id, None)
    shown = filters_of(request)
    ctx = get_context(request)
    reads = Reads.within(db)
    feedback = page_feedback_reads(ctx, reads)
    viewer = FeedbackViewer.of(access.caller.user.id, access.role)
    item = await feedback.one(access.project.id, feedback_id, viewer)
    comments, more = await feedback.comments(item.feedback.id, COMMENTS_SHOWN, None)
    neighbours = await feedback.neighbours(shown.query(access.project.id), item.feedback.id)
    team = [m for m in await members(reads, access.project.id)
            if m.role.includes(ProjectRole.DEVELOPER)]  # fmt: skip
    f = item.feedback
    context = f.context
    carried = shown.params(after_id=None)
    inbox = inbox_path(project_id, shown.application)
    return page(
        "console/feedback.html", visitor, status_code, project=access.project, item=item,
        row=_row(item, feedback.links, feedback.now), comments=list(reversed(comments)),
        more_comments=more is not None, neighbours=neighbours, team=team,
        build_page=build_path(project_id, f.application_id, f.build_id),
        application_page=f"/projects/{project_id}/apps/{f.application_id}",
        facts=context_facts(context),
        context_json=json.dumps(context, indent=2, ensure_ascii=False) if context else None,
        statuses=STATUSES, status_words=STATUS_WORDS, carried=carried,
        inbox=inbox + (f"?{shown.params(after_id=None, fixed_application=True)}"
                       if shown.params(after_id=None, fixed_application=True) else ""),
        base=feedback_path(project_id, f.id), max_comment=MAX_COMMENT_LENGTH,
        failed=failed, values=values or {}, errors=errors or {},
    )  # fmt: skip


def _back(project_id: str, feedback_id: str, request: Request, anchor: str) -> str:
    """The feedback's page again, in the same inbox order."""
    carried = filters_of(request).params(after_id=None)
    return f"{feedback_path(project_id, feedback_id)}{'?' + carried if carried else ''}#{anchor}"


@router.post("/projects/{project_id}/feedback/{feedback_id}/triage")
async def triage(request: Request, project_id: str, feedback_id: str) -> Response:
    """Its status and assignee, in one form (as the API's PATCH takes them)."""
    visitor, db = await visit(request)
    access, _ = await _team(db, visitor, project_id, None)
    fields = await form_fields(request)
    changes: dict[str, Any] = {"status": fields.get("status") or None,
                               "assignee": fields.get("assignee") or None}  # fmt: skip
    try:
        body = parse_form(FeedbackUpdate, changes)
        shown = await triage_service(get_context(request), db).update(
            access, feedback_id, body.model_dump(exclude_unset=True)
        )
    except FormError as exc:
        errors = {"status": "Choose a status from the list."} if "status" in exc.by_field else {}
        errors = errors or exc.by_field
        return await _render_feedback(request, visitor, db, project_id, feedback_id,
                                      failed="triage", values=fields, errors=errors,
                                      status_code=422)  # fmt: skip
    except ValidationFailed as exc:
        if not exc.errors:
            raise
        return await _render_feedback(request, visitor, db, project_id, feedback_id,
                                      failed="triage", values=fields,
                                      errors=domain_field_errors(exc, "assignee"),
                                      status_code=422)  # fmt: skip
    assignee = shown.assignee
    who = (assignee.name or assignee.email) if assignee else "nobody"
    visitor.tell(f"Saved: {STATUS_WORDS[shown.feedback.status].lower()}, assigned to {who}.")
    return see_other(_back(project_id, feedback_id, request, "triage"))


@router.post("/projects/{project_id}/feedback/{feedback_id}/comments")
async def reply(request: Request, project_id: str, feedback_id: str) -> Response:
    """A reply: the team's comment, mailed to the tester who sent the feedback (triage.py says
    when)."""
    visitor, db = await visit(request)
    access, _ = await _team(db, visitor, project_id, None)
    fields = await form_fields(request)
    try:
        body = parse_form(FeedbackCommentCreate, {"text": fields.get("text", "")})
    except FormError:
        text = fields.get("text", "").strip()
        error = (
            f"A reply is at most {MAX_COMMENT_LENGTH:,} characters."
            if len(text) > MAX_COMMENT_LENGTH
            else "Write a reply first."
        )
        return await _render_feedback(request, visitor, db, project_id, feedback_id,
                                      failed="reply", values=fields, errors={"text": error},
                                      status_code=422)  # fmt: skip
    assert isinstance(body, FeedbackCommentCreate)
    service = triage_service(get_context(request), db)
    await service.comment(access, feedback_id, body.text)
    item = await service.reads.one(
        access.project.id, feedback_id, FeedbackViewer.of(access.caller.user.id, access.role)
    )
    tester = item.tester
    if tester is None:
        visitor.tell("Reply saved. Nobody is mailed: it was sent from the app, not by a member.")
    elif tester.id == access.caller.user.id:
        visitor.tell("Reply saved.")
    else:
        visitor.tell(f"Reply sent: {tester.name or tester.email} gets it by mail.")
    return see_other(_back(project_id, feedback_id, request, "comments"))

"""The console's feedback pages on a tester's side: a build's page for a tester (what it is,
its Install button and the "Send feedback" form, console/feedback_form.py), that form's POST,
and the tester's own feedback across their projects with its status and the team's replies
(the service behind `/api/account/feedback`). The team's inbox is not here."""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import APIRouter, Request, Response
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.auth.dependencies import client_ip, count_budget, count_request
from buildbay.builds.dependencies import build_reads, install_link_reads
from buildbay.builds.schemas import version_label
from buildbay.builds.service import human_size
from buildbay.console.feedback_form import (
    SENT,
    FeedbackForm,
    FeedbackRefused,
    context_json,
    receive_feedback,
)
from buildbay.console.pages import ConsoleRoute, page, see_other, sessions, visit
from buildbay.console.session import CSRF_FIELD, Visitor
from buildbay.console_urls import OWN_FEEDBACK_PATH, build_url
from buildbay.context import AppContext
from buildbay.db.reads import Reads
from buildbay.deps import get_context, request_session
from buildbay.errors import NotAuthenticated
from buildbay.feedback.dependencies import count_reporter, page_feedback_reads
from buildbay.feedback.enums import FeedbackStatus
from buildbay.feedback.reads import CommentRecord, InboxItem
from buildbay.feedback.records import Sender
from buildbay.feedback.service import Senders
from buildbay.ids import InvalidCursorError, decode_cursor
from buildbay.projects.authorization import ApplicationAccess, application_of, tester_of
from buildbay.projects.enums import ProjectRole

router = APIRouter(route_class=ConsoleRoute, include_in_schema=False)

OWN_PAGE_SIZE = 20
REPLIES_SHOWN = 50  # of a feedback's comments, newest first
# The words of a feedback's status, to its tester.
STATUS_WORDS = {
    FeedbackStatus.NEW: "Sent",
    FeedbackStatus.TRIAGED: "Seen by the team",
    FeedbackStatus.RESOLVED: "Resolved",
    FeedbackStatus.WONT_FIX: "Will not be fixed",
}


def form_of(project_id: str, app_id: str, build_id: str, visitor: Visitor) -> FeedbackForm:
    return FeedbackForm(
        action=build_url("", project_id, app_id, build_id) + "/feedback", csrf=visitor.csrf
    )


async def render_tester_build(
    request: Request, visitor: Visitor, db: AsyncSession, access: ApplicationAccess,
    build_id: str, form: FeedbackForm | None = None, status_code: int = 200,
) -> Response:  # fmt: skip
    """A build's page for a tester: only a build distributed to them (403 `not_distributed`
    otherwise, as the API answers), with its feedback form."""
    reads = Reads.within(db)
    ctx = get_context(request)
    build = await build_reads(ctx, reads).get(access.application.id, build_id, tester_of(access))
    project, application = access.project, access.application
    if form is None:
        form = form_of(project.id, application.id, build.id, visitor)
    return page(
        "console/build_tester.html", visitor, status_code, project=project,
        application=application, build=build, version=version_label(build.metadata_),
        size=human_size(build.file_size), feedback=form, own_feedback=OWN_FEEDBACK_PATH,
    )  # fmt: skip


@router.post("/projects/{project_id}/apps/{app_id}/builds/{build_id}/feedback")
async def send_feedback(request: Request, project_id: str, app_id: str, build_id: str) -> Response:
    """The build page's "Send feedback" form: the signed-in member, as the API's session
    sender (feedback/service.py `Senders.member`: a tester it is distributed to, or the team),
    decided before the body is read; its CSRF token is a field of the form, checked before
    anything is stored."""
    ctx = get_context(request)
    console = sessions(request)
    console.check_origin(request, ctx.settings.resolved_public_url)
    async with ctx.sessions() as own:  # not the request's: nothing held while the body comes
        visitor = await console.visitor(request, own, ctx.clock.now())
    request.scope["buildbay.visitor"] = visitor
    if visitor.user is None:
        raise NotAuthenticated("Sign in to continue")
    await count_request(ctx, request, f"user:{visitor.user.id}", visitor.user.plan)
    form = form_of(project_id, app_id, build_id, visitor)

    def check_csrf(extra: dict[str, str]) -> None:
        console.check_csrf(visitor, extra.get(CSRF_FIELD))

    async def sender() -> Sender:
        return await _member_sender(ctx, request, visitor, project_id, app_id, build_id)

    try:
        await receive_feedback(request, ctx, form, sender, (CSRF_FIELD,), check_csrf)
    except FeedbackRefused as refused:
        db = request_session(request)
        access = await application_of(
            Reads.within(db), visitor.principal, project_id, app_id, ProjectRole.TESTER
        )
        return await render_tester_build(
            request, visitor, db, access, build_id, refused.form, refused.status
        )
    visitor.tell(SENT)
    return see_other(build_url("", project_id, app_id, build_id) + "#feedback")


async def _member_sender(
    ctx: AppContext, request: Request, visitor: Visitor, project_id: str, app_id: str,
    build_id: str,
) -> Sender:  # fmt: skip
    settings = ctx.settings
    await count_budget(
        ctx, request, f"feedback-ip:{client_ip(request)}", settings.feedback_per_minute_per_ip,
        "feedback-ip", "More than {limit} feedback in a minute from this address (feedback-ip)",
    )  # fmt: skip
    reads = Reads.on(ctx.read_engine)
    try:
        senders = Senders(
            reads, ctx.clock.now(), build_reads(ctx, reads), install_link_reads(ctx, reads)
        )
        sender = await senders.member(visitor.principal, project_id, app_id, build_id)
    finally:
        await reads.close()
    assert sender.tester is not None
    await count_reporter(ctx, request, sender.tester.id)
    return sender


@dataclass(frozen=True, slots=True)
class OwnFeedback:
    """One of the tester's feedback as their page shows it."""

    item: InboxItem
    status: str
    screenshots: list[tuple[str, int, int]]  # signed address, width, height
    replies: list[CommentRecord]
    context: str
    build_page: str


@router.get(OWN_FEEDBACK_PATH)
async def own_feedback(request: Request) -> Response:
    """What the visitor sent, newest first, across the projects they are still a member of,
    with its status and the team's replies."""
    visitor, db = await visit(request)
    ctx = get_context(request)
    reads = page_feedback_reads(ctx, Reads.within(db))
    after_id = None
    cursor = request.query_params.get("cursor")
    if cursor:
        try:
            after_id = decode_cursor(cursor)
        except InvalidCursorError:
            return see_other(OWN_FEEDBACK_PATH)
    found, next_cursor = await reads.own_page(visitor.principal.user.id, OWN_PAGE_SIZE, after_id)
    links, now = reads.links, reads.now
    replies = await reads.latest_comments(
        [item.feedback.id for item in found if item.comments_count], REPLIES_SHOWN
    )
    shown = []
    for item in found:
        f = item.feedback
        shown.append(
            OwnFeedback(
                item,
                STATUS_WORDS[f.status],
                [(links.short_lived(s.id, now), s.width, s.height) for s in item.screenshots],
                replies.get(f.id, []),
                context_json(f.context),
                build_url("", f.project_id, f.application_id, f.build_id),
            )
        )
    return page(
        "console/own_feedback.html", visitor, feedback=shown, next_cursor=next_cursor,
        more_replies=REPLIES_SHOWN,
    )  # fmt: skip

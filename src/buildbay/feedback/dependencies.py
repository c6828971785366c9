"""How the feedback services are made from the app's context (the submission's, the team's
triage and reads, on the request's unit of work or its read-only reads; the console calls the
factories), and who sends a feedback, as an HTTP request says it (its Authorization header or
the console's session cookie), checked before a byte of its body is read."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from fastapi import Request
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.auth.authentication import Principal
from buildbay.auth.dependencies import (
    authenticate,
    client_ip,
    count_budget,
    count_request,
    limit_by_ip,
)
from buildbay.builds.dependencies import build_reads, install_link_reads
from buildbay.console.pages import sessions as console_sessions
from buildbay.console.session import CSRF_HEADER
from buildbay.context import AppContext
from buildbay.db.reads import Reads
from buildbay.deps import in_unit_of_work, on_reads
from buildbay.errors import NotAuthenticated
from buildbay.feedback.links import ScreenshotLinks
from buildbay.feedback.reads import FeedbackReads
from buildbay.feedback.records import Sender
from buildbay.feedback.service import FeedbackService, Senders
from buildbay.feedback.triage import TriageService

FEEDBACK_SPOOL = "feedback-incoming"  # under the data directory: spool_dir


def screenshot_links(ctx: AppContext) -> ScreenshotLinks:
    return ScreenshotLinks(ctx.settings.signing_key, ctx.settings.resolved_public_url)


def feedback_service(ctx: AppContext, db: AsyncSession) -> FeedbackService:
    return FeedbackService(
        db, ctx.clock.now(), ctx.storage, screenshot_links(ctx), ctx.mail,
        ctx.settings.resolved_public_url,
    )  # fmt: skip


def spool_dir(ctx: AppContext) -> Path:
    """Where screenshots wait while a feedback is read and re-encoded, as they arrived and as a
    worker re-encoded them (files by name, which the worker reads and writes, and the sweeper
    removes if a crash left them): the data directory's disk (a /tmp in memory would count
    against it)."""
    path = ctx.settings.data_dir / FEEDBACK_SPOOL
    path.mkdir(parents=True, exist_ok=True)
    return path


def triage_service(ctx: AppContext, db: AsyncSession) -> TriageService:
    return TriageService(
        db, ctx.clock.now(), ctx.mail, screenshot_links(ctx), ctx.settings.resolved_public_url
    )


def feedback_reads(ctx: AppContext, reads: Reads) -> FeedbackReads:
    return FeedbackReads(reads, ctx.clock.now(), screenshot_links(ctx))


def page_feedback_reads(ctx: AppContext, reads: Reads) -> FeedbackReads:
    """The feedback reads of the console's pages (the team's inbox, a tester's own page): their
    screenshot addresses are paths of this server, since a page's Content-Security-Policy
    takes images from its own origin only, whatever the public URL."""
    return FeedbackReads(reads, ctx.clock.now(), ScreenshotLinks(ctx.settings.signing_key, ""))


Service = Annotated[FeedbackService, in_unit_of_work(feedback_service)]
Triage = Annotated[TriageService, in_unit_of_work(triage_service)]
TeamReads = Annotated[FeedbackReads, on_reads(feedback_reads)]

# The schemes of `Authorization` a feedback may come with, besides a session cookie.
BEARER, INSTALL_LINK, UPDATE_KEY = "bearer", "installlink", "updatekey"


async def feedback_sender(
    ctx: AppContext, request: Request, project_id: str, app_id: str, build_id: str
) -> Sender:
    """Who sends this feedback (feedback/service.py `Senders` says who may), counted against
    the feedback budgets: per client IP first, then per member, or per application for its
    update key. Read on reads of its own, closed before the body is read."""
    settings = ctx.settings
    await count_budget(
        ctx, request, f"feedback-ip:{client_ip(request)}", settings.feedback_per_minute_per_ip,
        "feedback-ip", "More than {limit} feedback in a minute from this address (feedback-ip)",
    )  # fmt: skip
    scheme, _, credential = request.headers.get("authorization", "").partition(" ")
    scheme, credential = scheme.lower(), credential.strip()
    reads = Reads.on(ctx.read_engine)
    try:
        senders = Senders(
            reads, ctx.clock.now(), build_reads(ctx, reads), install_link_reads(ctx, reads)
        )
        if scheme == INSTALL_LINK:
            sessions = console_sessions(request)

            async def visitor() -> str | None:
                return await sessions.signed_in(request, reads, ctx.clock.now())

            sender = await senders.install_link(credential, project_id, app_id, build_id, visitor)
        elif scheme == UPDATE_KEY:
            sender = await senders.update_key(credential, project_id, app_id, build_id)
            await count_budget(
                ctx, request, f"feedback-key:{sender.application.id}",
                settings.feedback_per_minute_per_update_key, "feedback-key",
                "More than {limit} feedback in a minute with this application's update key "
                "(feedback-key)",
            )  # fmt: skip
        else:
            caller = await _member(ctx, request, scheme, credential)
            sender = await senders.member(caller, project_id, app_id, build_id)
    finally:
        await reads.close()
    if sender.tester is not None:
        await count_reporter(ctx, request, sender.tester.id)
    return sender


async def count_reporter(ctx: AppContext, request: Request, reporter: str) -> None:
    """One feedback of `reporter` (a member's id, or the e-mail an app sent with the update
    key) against its budget."""
    await count_budget(
        ctx, request, f"feedback-reporter:{reporter}",
        ctx.settings.feedback_per_minute_per_reporter, "feedback-reporter",
        "More than {limit} feedback in a minute from one reporter (feedback-reporter)",
    )  # fmt: skip


async def _member(ctx: AppContext, request: Request, scheme: str, credential: str) -> Principal:
    """A signed-in member: a bearer token (an access token or an API token), or the console's
    session cookie with its CSRF token (the console's pages post feedback from the browser),
    counted as any API request of theirs is."""
    try:
        if scheme == BEARER and credential:
            principal = await authenticate(ctx, credential)
        elif not scheme:
            principal = await _console_visitor(ctx, request)
        else:
            raise NotAuthenticated(
                "Send `Authorization: Bearer <token>`, `Authorization: InstallLink <token>` "
                "(a personal install link's) or `Authorization: UpdateKey <key>`"
            )
    except NotAuthenticated:
        await limit_by_ip(ctx, request)
        raise
    await count_request(ctx, request, f"user:{principal.user.id}", principal.user.plan)
    return principal


async def _console_visitor(ctx: AppContext, request: Request) -> Principal:
    """Who is signed in on the console in this browser, for a form posted from one of its pages
    (our origin, with the page's CSRF token in the X-CSRF-Token header)."""
    sessions = console_sessions(request)
    if not request.cookies.get(sessions.session_cookie):
        raise NotAuthenticated()
    sessions.check_origin(request, ctx.settings.resolved_public_url)
    async with ctx.sessions() as db:
        visitor = await sessions.visitor(request, db, ctx.clock.now())
    if visitor.user is None:
        raise NotAuthenticated("Your console session has ended: sign in again")
    sessions.check_csrf(visitor, request.headers.get(CSRF_HEADER))
    return visitor.principal

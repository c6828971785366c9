"""Sending feedback on a build (`POST .../builds/{buildId}/feedback`), a member's wish for a
mail per feedback, and the address that serves a screenshot (`/feedback-screenshots/{token}`).
The team's reading of feedback is team_routes.py's."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import IO, Annotated

from fastapi import APIRouter, Path, Request, Response, status
from fastapi.responses import RedirectResponse, StreamingResponse
from sqlalchemy import bindparam, select

from buildbay.auth.dependencies import client_ip, count_budget
from buildbay.db.reads import Reads
from buildbay.deps import Context, ReadsDep, TransactionRoute, request_session
from buildbay.errors import NotFound, ValidationFailed
from buildbay.feedback import schemas
from buildbay.feedback.dependencies import (
    Service,
    count_reporter,
    feedback_sender,
    feedback_service,
    screenshot_links,
    spool_dir,
)
from buildbay.feedback.images import NotAnImage, Reencoded, discard, reencode_all
from buildbay.feedback.links import SCREENSHOTS_PATH
from buildbay.feedback.models import FeedbackScreenshot
from buildbay.feedback.service import feedback_mail_of, reporter_email
from buildbay.feedback.submission import SCREENSHOTS, read_submission
from buildbay.problems import problem_responses
from buildbay.projects.access import ProjectDeveloper, ProjectDeveloperReader
from buildbay.storage.base import READ_BLOCK

router = APIRouter(tags=["feedback"], route_class=TransactionRoute)

ProjectId = Annotated[str, Path(alias="projectId")]
AppId = Annotated[str, Path(alias="appId")]
BuildId = Annotated[str, Path(alias="buildId")]

# How long the storage's own address of a screenshot lives: the browser follows it at once.
_VIEW = timedelta(seconds=60)
_SCREENSHOT_CACHE = "private, max-age=300"


@router.post(
    "/api/app-distribution/{projectId}/{appId}/builds/{buildId}/feedback",
    status_code=status.HTTP_201_CREATED,
    responses={
        201: {"description": "The feedback, stored with its screenshots"},
        **problem_responses(400, 401, 403, 404, 409, 410, 413, 422, 429),
    },
    openapi_extra={"requestBody": schemas.SUBMISSION_BODY},
    summary="Send feedback on a build, with screenshots (a tester it is distributed to, a "
    "personal install link, or an app with the update key)",
)
async def send_feedback(
    request: Request, ctx: Context, project_id: ProjectId, app_id: AppId, build_id: BuildId
) -> schemas.Feedback:
    # Who sends it, before a byte of the body is read: a refusal costs nothing more.
    sender = await feedback_sender(ctx, request, project_id, app_id, build_id)
    spool = spool_dir(ctx)
    content_type = request.headers.get("content-type", "")
    submission = await read_submission(content_type, request.stream(), spool)
    shots: list[Reencoded] = []
    try:
        reporter = reporter_email(sender, submission)
        if sender.tester is None:  # an app with the update key: its reporter's own budget
            await count_reporter(ctx, request, reporter)
        try:
            shots = await reencode_all([u.path for u in submission.screenshots], spool)
        except NotAnImage as exc:
            raise ValidationFailed.for_field(
                SCREENSHOTS, str(exc), code="unreadable_screenshot"
            ) from None
        service = feedback_service(ctx, request_session(request))
        shown = await service.create(sender, submission, shots)
    finally:
        await discard([*shots, submission])
    links, now = screenshot_links(ctx), ctx.clock.now()
    return schemas.feedback_schema(shown, lambda s: links.short_lived(s.id, now))


@router.get(
    "/api/projects/{id}/members/me/feedback-mail",
    responses=problem_responses(401, 403, 404, 429),
    summary="Whether you get a mail for each feedback sent on the project's builds (developer+)",
)
async def get_feedback_mail(
    access: ProjectDeveloperReader, reads: ReadsDep
) -> schemas.FeedbackMail:
    return schemas.FeedbackMail(feedback_mail=await feedback_mail_of(reads, access))


@router.put(
    "/api/projects/{id}/members/me/feedback-mail",
    responses=problem_responses(400, 401, 403, 404, 413, 422, 429),
    summary="Get a mail for each feedback sent on the project's builds, or stop (developer+)",
)
async def set_feedback_mail(
    body: schemas.FeedbackMailUpdate, access: ProjectDeveloper, service: Service
) -> schemas.FeedbackMail:
    return schemas.FeedbackMail(feedback_mail=await service.set_mail(access, body.feedback_mail))


_SCREENSHOT = select(
    FeedbackScreenshot.storage_key, FeedbackScreenshot.content_type, FeedbackScreenshot.bytes
).where(FeedbackScreenshot.id == bindparam("id"))


@router.get(
    SCREENSHOTS_PATH + "/{token}",
    response_class=Response,
    responses={
        200: {"content": {"image/png": {}, "image/jpeg": {}}, "description": "The screenshot"},
        302: {"description": "Where the storage serves it (S3): a short-lived signed address"},
        **problem_responses(403, 404, 429),
    },
    summary="A feedback's screenshot (its signed address; no token)",
)
async def screenshot(token: str, request: Request, ctx: Context) -> Response:
    now = ctx.clock.now()
    screenshot_id = screenshot_links(ctx).screenshot_of(token, now)
    await count_budget(
        ctx, request, f"screenshots-ip:{client_ip(request)}",
        ctx.settings.install_pages_per_minute_per_ip, "screenshots-ip",
        "More than {limit} screenshots in a minute from this address (screenshots-ip)",
    )  # fmt: skip
    reads = Reads.on(ctx.read_engine)
    try:
        row = await reads.first(_SCREENSHOT, {"id": screenshot_id})
    finally:
        await reads.close()
    if row is None:
        raise NotFound(
            "This screenshot no longer exists: its feedback was deleted",
            code="screenshot_not_found",
        )
    key, content_type, size = row["storage_key"], row["content_type"], row["bytes"]
    name = key.rsplit("/", 1)[-1]
    storage = ctx.storage
    url = await storage.view_url(key, name, content_type, now + _VIEW)
    if url is not None:
        return RedirectResponse(url, status_code=302, headers={"Cache-Control": "no-store"})
    return StreamingResponse(
        _blocks(storage.open_reader(key, size)),
        media_type=content_type,
        headers={
            "Content-Length": str(size),
            "Content-Disposition": f'inline; filename="{name}"',
            "Cache-Control": _SCREENSHOT_CACHE,
        },
    )


async def _blocks(file: IO[bytes]) -> AsyncIterator[bytes]:
    try:
        while block := await asyncio.to_thread(file.read, READ_BLOCK):
            yield block
    finally:
        await asyncio.to_thread(file.close)

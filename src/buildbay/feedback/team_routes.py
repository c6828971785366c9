"""The team's feedback API: the project's inbox, one feedback, its triage (status, assignee)
and comments; and a tester's own feedback across projects."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, status

from buildbay.auth.dependencies import Authenticated
from buildbay.auth.enums import TokenScope
from buildbay.deps import Page, TransactionRoute
from buildbay.feedback import team_schemas as schemas
from buildbay.feedback.dependencies import TeamReads, Triage
from buildbay.feedback.enums import FeedbackCategory, FeedbackStatus
from buildbay.feedback.reads import FeedbackQuery, FeedbackViewer, comment_schema
from buildbay.openapi import link, linked
from buildbay.problems import problem_responses
from buildbay.projects.access import ProjectDeveloper, ProjectDeveloperReader, ProjectReader
from buildbay.schemas import NO_NUL_PATTERN, PAGE_QUERY

router = APIRouter(tags=["feedback"], route_class=TransactionRoute)

_INBOX = "/api/projects/{id}/feedback"
_ONE = f"{_INBOX}/{{feedbackId}}"
_COMMENTS = f"{_ONE}/comments"
BY_ID = problem_responses(401, 403, 404, 429)
WRITE = problem_responses(400, 401, 403, 404, 413, 422, 429)

FeedbackId = Annotated[str, Path(alias="feedbackId", max_length=64)]


def _feedback_links(feedback: str) -> dict[str, dict[str, Any]]:
    """What a feedback (at `feedback`, a runtime expression to its object) opens."""
    by_id = {"id": f"{feedback}/projectId", "feedbackId": f"{feedback}/id"}
    return {
        "GetFeedback": link("GET", _ONE, "The feedback", by_id),
        "UpdateFeedback": link("PATCH", _ONE, "Triage it", by_id),
        "ListFeedbackComments": link("GET", _COMMENTS, "The team's comments", by_id),
        "CommentOnFeedback": link("POST", _COMMENTS, "Reply to its tester", by_id),
    }


@router.get(
    _INBOX,
    responses={
        **linked(200, "A page of feedback", _feedback_links("$response.body#/feedback/0")),
        **problem_responses(401, 403, 404, 422, 429),
    },
    summary="The project's feedback, newest first, filtered (developer+)",
    openapi_extra=PAGE_QUERY,
)
async def list_feedback(
    access: ProjectDeveloperReader,
    reads: TeamReads,
    page: Page,
    application: Annotated[
        str | None,
        Query(max_length=64, pattern=NO_NUL_PATTERN, description="Only an application's (id)"),
    ] = None,
    build: Annotated[
        str | None,
        Query(max_length=64, pattern=NO_NUL_PATTERN, description="Only a build's (id)"),
    ] = None,
    status: Annotated[FeedbackStatus | None, Query(description="Only in this state")] = None,
    category: Annotated[FeedbackCategory | None, Query(description="Only of this kind")] = None,
    q: Annotated[
        str | None,
        Query(
            max_length=200,
            pattern=NO_NUL_PATTERN,
            description="Only feedback whose text or reporter's e-mail holds this, in any case",
        ),
    ] = None,
) -> schemas.FeedbackList:
    query = FeedbackQuery(
        access.project.id, page.limit, page.after_id, application, build, status, category, q
    )
    found, next_cursor = await reads.page(query)
    viewer = FeedbackViewer.of(access.caller.user.id, access.role)
    shown = reads.present(found, viewer)
    return schemas.FeedbackList(feedback=shown, next_cursor=next_cursor)


@router.get(
    _ONE,
    responses={**linked(200, "The feedback", _feedback_links("$response.body#")), **BY_ID},
    summary="One feedback (developer+, and the tester who sent it)",
)
async def get_feedback(
    feedback_id: FeedbackId, access: ProjectReader, reads: TeamReads
) -> schemas.TeamFeedback:
    viewer = FeedbackViewer.of(access.caller.user.id, access.role)
    shown = await reads.one(access.project.id, feedback_id, viewer)
    return reads.present([shown], viewer)[0]


@router.patch(
    _ONE,
    responses={**linked(200, "The feedback", _feedback_links("$response.body#")), **WRITE},
    summary="Triage a feedback: its status, who it is assigned to (developer+)",
)
async def update_feedback(
    feedback_id: FeedbackId, body: schemas.FeedbackUpdate, access: ProjectDeveloper, triage: Triage
) -> schemas.TeamFeedback:
    shown = await triage.update(access, feedback_id, body.model_dump(exclude_unset=True))
    viewer = FeedbackViewer.of(access.caller.user.id, access.role)
    return triage.reads.present([shown], viewer)[0]


@router.get(
    _COMMENTS,
    responses=problem_responses(401, 403, 404, 422, 429),
    summary="The team's comments on a feedback, newest first (developer+, and the tester who "
    "sent it)",
    openapi_extra=PAGE_QUERY,
)
async def list_comments(
    feedback_id: FeedbackId, access: ProjectReader, reads: TeamReads, page: Page
) -> schemas.FeedbackCommentList:
    viewer = FeedbackViewer.of(access.caller.user.id, access.role)
    shown = await reads.one(access.project.id, feedback_id, viewer)
    found, next_cursor = await reads.comments(shown.feedback.id, page.limit, page.after_id)
    return schemas.FeedbackCommentList(
        comments=[comment_schema(c, viewer) for c in found], next_cursor=next_cursor
    )


@router.post(
    _COMMENTS,
    status_code=status.HTTP_201_CREATED,
    responses=WRITE,
    summary="Comment on a feedback; the tester who sent it gets it by mail (developer+)",
)
async def comment_on_feedback(
    feedback_id: FeedbackId,
    body: schemas.FeedbackCommentCreate,
    access: ProjectDeveloper,
    triage: Triage,
) -> schemas.FeedbackComment:
    comment = await triage.comment(access, feedback_id, body.text)
    return comment_schema(comment, FeedbackViewer.of(access.caller.user.id, access.role))


@router.get(
    "/api/account/feedback",
    responses=problem_responses(401, 403, 422, 429),
    summary="The feedback you sent, across your projects, newest first, with the team's "
    "comments counted (an API token: its projects only)",
    openapi_extra=PAGE_QUERY,
)
async def own_feedback(caller: Authenticated, reads: TeamReads, page: Page) -> schemas.FeedbackList:
    caller.require_scope(TokenScope.READ)
    user_id = caller.user.id
    found, next_cursor = await reads.own_page(
        user_id, page.limit, page.after_id, caller.project_ids
    )
    viewer = FeedbackViewer(user_id, team=False)
    shown = reads.present(found, viewer)
    return schemas.FeedbackList(feedback=shown, next_cursor=next_cursor)

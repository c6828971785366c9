"""The team's side of feedback as the API shows it: the inbox (a page of feedback with its
triage), one feedback, the team's comments, and the bodies that change them.

`TeamFeedback` is the feedback as the submission shows it (schemas.py's `Feedback`) plus what
the team's side adds. Free of the database and the web (tests/test_layers.py): reads.py turns
records into these.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from pydantic import Field, field_validator, model_validator

from buildbay.feedback.enums import FeedbackStatus
from buildbay.feedback.schemas import Feedback
from buildbay.schemas import NO_NUL_PATTERN, ApiModel, NotNull, RequestModel, Timestamp, Trimmed

MAX_COMMENT_LENGTH = 10_000


class FeedbackPerson(ApiModel):
    id: str
    name: str
    email: str | None = Field(
        description="Null to a tester: testers see people's names, not their addresses"
    )


class TeamFeedback(Feedback):
    project_id: str
    application_id: str
    application_name: str
    build_version: str | None = Field(
        description="The build's version as people read it (`1.4.2 (42)`), if its file says one"
    )
    assignee: FeedbackPerson | None = Field(
        description="The developer (or admin, or owner) it is assigned to; null when it is not, "
        "and always to the tester who sent it (triage is the team's)"
    )
    comments_count: int = Field(description="The team's comments on it")


class FeedbackList(ApiModel):
    feedback: list[TeamFeedback]
    next_cursor: str | None


class FeedbackUpdate(RequestModel):
    """Fields present are changed; fields left out keep their value (at least one is sent)."""

    EXAMPLE: ClassVar[dict[str, Any] | None] = {"status": "triaged"}
    NOT_EMPTY: ClassVar[bool] = True

    status: FeedbackStatus | None = NotNull
    assignee: Annotated[str, Field(max_length=64, pattern=NO_NUL_PATTERN)] | None = Field(
        default=None,
        description="The user id of a developer, admin or owner of the project; null: nobody",
    )

    @field_validator("status")
    @classmethod
    def _not_null(cls, value: object) -> object:
        # Only reached when the client sent the field: leaving it out keeps it, null is refused.
        if value is None:
            raise ValueError("cannot be null")
        return value

    @model_validator(mode="after")
    def _something(self) -> FeedbackUpdate:
        if not self.model_fields_set:
            raise ValueError("Send status, assignee or both")
        return self


CommentText = Annotated[str, Field(min_length=1, max_length=MAX_COMMENT_LENGTH), Trimmed()]


class FeedbackCommentCreate(RequestModel):
    EXAMPLE: ClassVar[dict[str, Any] | None] = {
        "text": "Thanks! Fixed in 1.4.3, which is on its way to you."
    }

    text: CommentText = Field(description=f"1 to {MAX_COMMENT_LENGTH:,} characters")


class FeedbackComment(ApiModel):
    id: str
    feedback_id: str
    author: FeedbackPerson | None = Field(
        description="The member who wrote it; null once they are gone"
    )
    text: str
    created_at: Timestamp


class FeedbackCommentList(ApiModel):
    comments: list[FeedbackComment]
    next_cursor: str | None

"""Feedback as the API shows it (docs/api.md, "Feedback")."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, ClassVar

from pydantic import Field

from buildbay.feedback.enums import FeedbackCategory, FeedbackStatus
from buildbay.feedback.records import ScreenshotRecord, ShownFeedback
from buildbay.schemas import NOT_BLANK_PATTERN, ApiModel, RequestModel, Timestamp


class FeedbackScreenshot(ApiModel):
    id: str
    width: int = Field(description="In pixels, upright")
    height: int
    bytes: int = Field(description="The size of the stored image (re-encoded: PNG or JPEG)")
    url: str = Field(
        description="A short-lived signed address of the image (no token needed; it stops "
        "working when it expires, or when the feedback is deleted)"
    )


class FeedbackTester(ApiModel):
    id: str
    email: str


class Feedback(ApiModel):
    id: str
    build_id: str
    tester: FeedbackTester | None = Field(
        description="The member who sent it; null when an app sent it with the application's "
        "update key (`reporterEmail` says who), or the account is gone"
    )
    reporter_email: str = Field(description="Whom to answer: the tester's, or the one sent")
    category: FeedbackCategory
    text: str
    context: dict[str, Any] | None = Field(
        description="What the app or device said of itself (JSON object, at most 16 KiB)"
    )
    screenshots: list[FeedbackScreenshot] = Field(description="In the order they were sent")
    status: FeedbackStatus
    created_at: Timestamp
    updated_at: Timestamp


def feedback_schema(shown: ShownFeedback, url: Callable[[ScreenshotRecord], str]) -> Feedback:
    """`shown` as the API shows it; `url` gives each screenshot's signed address."""
    f, tester = shown.feedback, shown.tester
    return Feedback(
        id=f.id,
        build_id=f.build_id,
        tester=FeedbackTester(id=tester.id, email=tester.email) if tester is not None else None,
        reporter_email=f.reporter_email,
        category=f.category,
        text=f.text,
        context=f.context,
        screenshots=[
            FeedbackScreenshot(id=s.id, width=s.width, height=s.height, bytes=s.bytes, url=url(s))
            for s in shown.screenshots
        ],
        status=f.status,
        created_at=f.created_at,
        updated_at=f.updated_at,
    )


class FeedbackMailUpdate(RequestModel):
    EXAMPLE: ClassVar[dict[str, Any] | None] = {"feedbackMail": True}

    feedback_mail: Annotated[bool, Field(strict=True)] = Field(
        description="Whether to get a mail for each feedback sent on the project's builds"
    )


class FeedbackMail(ApiModel):
    feedback_mail: bool = Field(
        description="Whether you get a mail for each feedback sent on the project's builds"
    )


# The OpenAPI description of the multipart body of `POST .../feedback` (read by
# feedback/submission.py, not by FastAPI: its limits are checked as the body arrives).
SUBMISSION_BODY: dict[str, Any] = {
    "required": True,
    "content": {
        "multipart/form-data": {
            "schema": {
                "type": "object",
                "required": ["text", "category"],
                "additionalProperties": False,
                "properties": {
                    "text": {
                        "type": "string",
                        "minLength": 1,
                        "maxLength": 20_000,
                        "pattern": NOT_BLANK_PATTERN,
                        "description": "What happened (1 to 20,000 characters, trimmed)",
                    },
                    "category": {"type": "string", "enum": [c.value for c in FeedbackCategory]},
                    "context": {
                        "type": "object",
                        "description": "A JSON object of at most 16 KiB (the part's text): what "
                        'the app and the device say of themselves, e.g. {"model": "Pixel 8", '
                        '"os": "14"}',
                    },
                    "reporterEmail": {
                        "type": "string",
                        "format": "email",
                        "description": "Whom to answer: required with `Authorization: "
                        "UpdateKey`, refused otherwise (a member's feedback is theirs)",
                    },
                    "screenshots": {
                        "type": "array",
                        "maxItems": 5,
                        "items": {"type": "string", "format": "binary"},
                        "description": "Up to 5 images (PNG, JPEG or HEIC), 10 MiB each: the "
                        "field repeated once per file",
                    },
                },
            },
            "encoding": {
                "context": {"contentType": "application/json"},
                "screenshots": {"contentType": "image/png, image/jpeg, image/heic"},
            },
        }
    },
}

"""The "Send feedback" form of a build's pages (the install page of a personal link, the console's
build page of a tester), posted without a script as `multipart/form-data`: read, checked and
stored by the same code as the API's `POST .../feedback` (feedback/submission.py, images.py,
service.py), so the page and the API refuse the same things, within the same limits (a body of
at most 60 MiB, refused before it is read when its Content-Length says more; a screenshot of at
most 10 MiB; five of them).

A refusal is the page again with the form as it was sent (the text typed, the category chosen)
and what is wrong said in sentences beside its fields; a form that went through redirects to
the page with a notice. Who sends it is decided before a byte of the body is read, on reads of
their own: no connection is held while a phone uploads its screenshots."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from fastapi import Request

from buildbay.console.pages import sentence
from buildbay.context import AppContext
from buildbay.deps import request_session
from buildbay.errors import BuildbayError, PayloadTooLarge, ValidationFailed
from buildbay.feedback.dependencies import feedback_service, spool_dir
from buildbay.feedback.enums import FeedbackCategory
from buildbay.feedback.images import NotAnImage, Reencoded, discard, reencode_all
from buildbay.feedback.records import Sender
from buildbay.feedback.submission import (
    CATEGORY,
    CONTEXT,
    MAX_BODY,
    MAX_SCREENSHOT_BYTES,
    MAX_SCREENSHOTS,
    MAX_TEXT,
    SCREENSHOTS,
    TEXT,
    MiB,
    read_submission,
)
from buildbay.numbers import whole_number

SENT = "Thanks — the team has your feedback."
# The categories as the form offers them, in its words.
CATEGORIES = [
    (FeedbackCategory.BUG.value, "Something does not work"),
    (FeedbackCategory.CRASH.value, "The app crashed"),
    (FeedbackCategory.SUGGESTION.value, "A suggestion"),
    (FeedbackCategory.OTHER.value, "Something else"),
]
# What the device says of itself when the page's script did not (or could not) say more.
_USER_AGENT_CHARS = 512
_LABELS = {TEXT: "feedback", CATEGORY: "category", CONTEXT: "device details"}
_PREDICATES = ("is ", "are ", "must ", "cannot ", "needs ", "has ")


@dataclass
class FeedbackForm:
    """The form as a page shows it: where it posts, what was sent (after a refusal) and what is
    wrong with it, by field (`text`, `category`, `screenshots`, `form`)."""

    action: str
    csrf: str | None = None  # the console's token; an install link's page has none
    values: dict[str, str] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    categories: list[tuple[str, str]] = field(default_factory=lambda: CATEGORIES)
    max_screenshots: int = MAX_SCREENSHOTS
    max_screenshot_mib: int = MAX_SCREENSHOT_BYTES // MiB
    max_body_mib: int = MAX_BODY // MiB
    max_text: int = MAX_TEXT


class FeedbackRefused(Exception):
    """The form, refused: shown again with `form.errors`, answered with `status`."""

    def __init__(self, form: FeedbackForm, status: int) -> None:
        super().__init__(form.errors)
        self.form = form
        self.status = status


def _said(name: str, message: str) -> str:
    if name == SCREENSHOTS and message.startswith("at most"):
        return (
            f"Choose at most {MAX_SCREENSHOTS} screenshots: a feedback takes no more. "
            "Your text is kept below; choose the screenshots again."
        )
    if name == SCREENSHOTS:
        return sentence(f"{message}. Choose the screenshots again")
    if message.startswith(_PREDICATES):
        return sentence(f"The {_LABELS.get(name, 'form')} {message}")
    return sentence(message)


def _errors_of(exc: BuildbayError) -> dict[str, str]:
    found: dict[str, str] = {}
    for error in exc.errors or ():
        name = error.field if error.field in (TEXT, CATEGORY, SCREENSHOTS) else "form"
        found.setdefault(name, _said(error.field, error.message))
    return found or {"form": sentence(exc.detail)}


def _too_large() -> str:
    return (
        f"The screenshots are larger than {MAX_BODY // MiB} MiB together: send fewer or "
        "smaller ones (each at most "
        f"{MAX_SCREENSHOT_BYTES // MiB} MiB)."
    )


def _typed(seen: dict[str, bytearray]) -> dict[str, str]:
    """What the person typed and chose, as far as it arrived: shown again in the form."""
    return {
        name: bytes(seen[name]).decode("utf-8", "replace")
        for name in (TEXT, CATEGORY)
        if name in seen
    }


def _device_context(request: Request) -> dict[str, Any]:
    """What a browser without the page's script says of itself: its user agent and first
    language (the script adds the screen's size)."""
    context: dict[str, Any] = {}
    agent = request.headers.get("user-agent")
    if agent:
        context["userAgent"] = agent[:_USER_AGENT_CHARS]
    language = request.headers.get("accept-language", "").split(",", 1)[0].split(";", 1)[0]
    if language.strip():
        context["language"] = language.strip()[:64]
    return context


async def _drain(body: AsyncIterator[bytes], received: int) -> None:
    """The rest of a refused form's body, read and dropped (at most MAX_BODY in all): a
    browser shows the answer only once it has sent its body, and the refusal is the page with
    the form again."""
    async for chunk in body:
        received += len(chunk)
        if received > MAX_BODY:
            return


async def receive_feedback(
    request: Request,
    ctx: AppContext,
    form: FeedbackForm,
    sender: Callable[[], Awaitable[Sender]],
    extra: tuple[str, ...] = (),
    check_extra: Callable[[dict[str, str]], None] | None = None,
) -> Sender:
    """The feedback the form posted, stored in the request's unit of work (committed by its
    route) for the sender `sender` says is allowed (before the body is read); FeedbackRefused
    with the form to show again if the body says anything the API would refuse.
    `check_extra` sees the page's own fields (`extra`: its CSRF token) before anything is
    stored."""
    allowed = await sender()
    length = whole_number(request.headers.get("content-length", ""), max_digits=20)
    if length is not None and length > MAX_BODY:
        # Refused before it is read, as the API's: nothing of it has arrived to show again.
        form.errors = {SCREENSHOTS: _too_large()}
        raise FeedbackRefused(form, 413)
    seen: dict[str, bytearray] = {}
    counted = _Counted(request.stream())
    spool = spool_dir(ctx)
    try:
        submission = await read_submission(
            request.headers.get("content-type", ""), counted, spool, extra=extra, seen=seen
        )
    except PayloadTooLarge:
        form.values, form.errors = _typed(seen), {SCREENSHOTS: _too_large()}
        raise FeedbackRefused(form, 413) from None
    except BuildbayError as exc:
        await _drain(counted, counted.received)
        form.values, form.errors = _typed(seen), _errors_of(exc)
        raise FeedbackRefused(form, exc.status) from None
    form.values = _typed(seen)
    shots: list[Reencoded] = []
    try:
        if check_extra is not None:
            check_extra(submission.extra)
        # A browser sends a textarea's line breaks as CRLF (HTML's form encoding): stored as
        # the text was typed, with the line breaks an app sends.
        submission.text = submission.text.replace("\r\n", "\n")
        if submission.context is None:
            submission.context = _device_context(request) or None
        try:
            shots = await reencode_all([u.path for u in submission.screenshots], spool)
        except NotAnImage as exc:
            form.errors = {SCREENSHOTS: _said(SCREENSHOTS, str(exc))}
            raise FeedbackRefused(form, 422) from None
        try:
            await feedback_service(ctx, request_session(request)).create(allowed, submission, shots)
        except ValidationFailed as exc:
            form.errors = _errors_of(exc)
            raise FeedbackRefused(form, exc.status) from None
    finally:
        await discard([*shots, submission])
    return allowed


class _Counted:
    """The request's body as it arrives, counting its bytes: after a refusal part way, the
    rest is read from where it stopped."""

    def __init__(self, body: AsyncIterator[bytes]) -> None:
        self._body = body
        self.received = 0

    def __aiter__(self) -> _Counted:
        return self

    async def __anext__(self) -> bytes:
        chunk = await self._body.__anext__()
        self.received += len(chunk)
        return chunk


def context_json(context: dict[str, Any] | None) -> str:
    """A feedback's device details as the tester's page shows them."""
    return json.dumps(context or {}, ensure_ascii=False, indent=2, sort_keys=True)

"""The console: a project's webhooks (admins). Add one (its secret shown once, on the page the
form redirects to), change its URL and events, enable or disable it, rotate its secret (shown
once, the same way), send a test (whose outcome the page shows once the first attempt is made:
on a reload, or without one where JavaScript asks `.../outcome`), and read the delivery log:
each delivery with every attempt, and a retry."""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from sqlalchemy.ext.asyncio import AsyncSession

from buildbay.audit.record import actor_of
from buildbay.builds.dependencies import build_reads
from buildbay.console import shown_once
from buildbay.console.pages import (
    ConsoleRoute,
    FormError,
    domain_field_errors,
    now,
    page,
    parse_form,
    posted_form,
    see_other,
    sessions,
    visit,
)
from buildbay.console.session import Visitor
from buildbay.console.shown_once import Shown
from buildbay.db.reads import Reads
from buildbay.deps import get_context
from buildbay.errors import BuildbayError
from buildbay.projects.authorization import ProjectAccess, project_of
from buildbay.projects.enums import ProjectRole
from buildbay.webhooks.chat import HOST_RULES, hint_table, suggested_format
from buildbay.webhooks.dependencies import webhook_service
from buildbay.webhooks.enums import DeliveryStatus, WebhookFormat
from buildbay.webhooks.events import SUBSCRIBABLE
from buildbay.webhooks.preview import preview
from buildbay.webhooks.reads import (
    DeliveryRecord,
    deliveries_of,
    delivery_detail,
    webhook_of,
    webhooks_of,
)
from buildbay.webhooks.schemas import WebhookCreate, WebhookUpdate

router = APIRouter(route_class=ConsoleRoute, include_in_schema=False)
EVENTS = [e.value for e in SUBSCRIBABLE]
LOG_SIZE = 50
FORMATS = {
    WebhookFormat.STANDARD: "Standard Webhooks (signed JSON event)",
    WebhookFormat.SLACK: "Slack",
    WebhookFormat.DISCORD: "Discord",
    WebhookFormat.TEAMS: "Microsoft Teams (Workflows)",
    WebhookFormat.GOOGLE_CHAT: "Google Chat",
}


# What the form says when the format chosen is not the one the address looks like it needs
# (`{fit}`, `{chosen}`: a format's label); said by the page, and by its script as it is typed.
LOOKS_LIKE = "This address looks like {fit}'s: choose {fit}, or it is sent messages it cannot read."
NOT_LIKE = (
    "This address does not look like {chosen}'s webhook address: check it, or choose the "
    "standard format for a receiver of your own."
)


def format_advice(url: str, chosen: str) -> dict[str, Any]:
    """What the form says beside the format: the one the URL looks like it needs, and a
    warning when the one chosen is another; `hosts`, the hint's prose, and `script`, what the
    page's script reads to say the same while the address is typed (the one table of
    webhooks/chat.py, and these sentences)."""
    suggested = suggested_format(url) if url else None
    warning = None
    if suggested is not None and suggested.value != chosen:
        warning = LOOKS_LIKE.format(fit=FORMATS[suggested])
    elif suggested is None and chosen != WebhookFormat.STANDARD and url:
        warning = NOT_LIKE.format(chosen=FORMATS[WebhookFormat(chosen)])
    return {
        "suggested": suggested.value if suggested else None,
        "suggested_label": FORMATS[suggested] if suggested else None,
        "warning": warning,
        "hosts": "; ".join(f"{rule.shown} → {FORMATS[rule.format]}" for rule in HOST_RULES),
        "script": {"rules": hint_table(), "looksLike": LOOKS_LIKE, "notLike": NOT_LIKE},
    }


async def _admin(request: Request, project_id: str) -> tuple[Visitor, AsyncSession, ProjectAccess]:
    visitor, db = await visit(request)
    access = await project_of(Reads.within(db), visitor.principal, project_id, ProjectRole.ADMIN)
    return visitor, db, access


async def _form(request: Request) -> dict[str, Any]:
    """The webhook form's fields: `events` is a list (one checkbox each)."""
    form = await posted_form(request)
    return {
        "url": str(form.get("url") or ""),
        "description": str(form.get("description") or ""),
        "events": [str(e) for e in form.getlist("events")],
        "format": str(form.get("format") or WebhookFormat.STANDARD.value),
    }


def _errors(exc: FormError) -> dict[str, str]:
    errors = dict(exc.by_field)
    if "events" in errors:
        errors["events"] = "Choose at least one event."
    if "url" in errors:
        errors["url"] = "Enter the receiver's address (up to 2048 characters)."
    if "format" in errors:
        errors["format"] = "Choose one of the formats."
    return errors


@router.get("/projects/{project_id}/webhooks")
async def webhooks_page(request: Request, project_id: str) -> Response:
    visitor, db, access = await _admin(request, project_id)
    return await _list(request, visitor, db, access)


async def _list(
    request: Request, visitor: Visitor, db: AsyncSession, access: ProjectAccess,
    values: dict[str, Any] | None = None, errors: dict[str, str] | None = None,
    status_code: int = 200,
) -> Response:  # fmt: skip
    hooks = await webhooks_of(Reads.within(db), access.project.id)
    values = values or {"events": [], "format": WebhookFormat.STANDARD.value}
    return page("console/webhooks.html", visitor, status_code, project=access.project,
                webhooks=hooks, events=EVENTS, values=values, errors=errors or {},
                formats=FORMATS,
                advice=format_advice(values.get("url", ""), values["format"]))  # fmt: skip


@router.post("/projects/{project_id}/webhooks")
async def add_webhook(request: Request, project_id: str) -> Response:
    visitor, db, access = await _admin(request, project_id)
    fields = await _form(request)
    try:
        body = parse_form(WebhookCreate, fields)
        assert isinstance(body, WebhookCreate)
        async with db.begin_nested():
            created = await webhook_service(get_context(request), db).create(
                access.project, body.url, body.events, body.description, body.format,
                by=actor_of(access),
            )  # fmt: skip
    except FormError as exc:
        return await _list(request, visitor, db, access, fields, _errors(exc), 422)
    except BuildbayError as exc:
        if exc.status >= 500:
            raise
        errors = domain_field_errors(exc, "url")
        return await _list(request, visitor, db, access, fields, errors, exc.status)
    # Shown on the page this redirects to, once (console/shown_once.py): a reload of that page
    # adds no second webhook.
    await shown_once.keep(sessions(request), visitor, db, now(request), Shown.WEBHOOK,
                          created.id, created.secret)  # fmt: skip
    return _back(visitor, project_id, created.id, "Webhook added.")


@router.get("/projects/{project_id}/webhooks/{webhook_id}")
async def webhook_page(request: Request, project_id: str, webhook_id: str) -> Response:
    visitor, db, access = await _admin(request, project_id)
    made = await shown_once.take(request, sessions(request), visitor, db, now(request),
                                 Shown.WEBHOOK, webhook_id)  # fmt: skip
    return await _webhook(request, visitor, db, access, webhook_id,
                          secret=made[1] if made else None)  # fmt: skip


async def _webhook(
    request: Request, visitor: Visitor, db: AsyncSession, access: ProjectAccess,
    webhook_id: str, *, secret: str | None = None, notice: str | None = None,
    values: dict[str, Any] | None = None, errors: dict[str, str] | None = None,
    status_code: int = 200,
) -> Response:  # fmt: skip
    reads = Reads.within(db)
    webhook = await webhook_of(reads, access.project.id, webhook_id)
    deliveries, _ = await deliveries_of(reads, webhook.id, LOG_SIZE, None)
    shown = values or {"url": webhook.url, "description": webhook.description,
                       "events": webhook.events, "format": webhook.format.value}  # fmt: skip
    # The test event just sent (`?test=` after the form), if it is this webhook's.
    tested = next((d for d in deliveries if d.id == request.query_params.get("test")), None)
    return page("console/webhook.html", visitor, status_code, project=access.project,
                webhook=webhook, deliveries=deliveries, events=EVENTS, secret=secret,
                values=shown, errors=errors or {}, notice=notice, formats=FORMATS,
                advice=format_advice(shown.get("url", ""), shown.get("format", "standard")),
                test=_test_outcome(access.project.id, tested) if tested else None)  # fmt: skip


def _test_outcome(project_id: str, delivery: DeliveryRecord) -> dict[str, Any]:
    """What the page says of a test event: its outcome once its first attempt is made, and
    where the page's script asks for it until then."""
    return {
        "known": _known(delivery),
        "text": outcome_text(delivery),
        "url": f"/projects/{project_id}/webhooks/{delivery.webhook_id}/deliveries/"
        f"{delivery.id}/outcome",
    }


def _known(delivery: DeliveryRecord) -> bool:
    return delivery.attempts > 0 or delivery.status is not DeliveryStatus.PENDING


def outcome_text(delivery: DeliveryRecord) -> str:
    """A delivery's outcome as a sentence."""
    if not _known(delivery):
        return "Sending the test event…"
    took = f" in {delivery.last_duration_ms} ms" if delivery.last_duration_ms is not None else ""
    if delivery.status is DeliveryStatus.DELIVERED:
        return f"Delivered: the receiver answered {delivery.last_status_code}{took}."
    if delivery.last_status_code is not None:
        why = f"the receiver answered {delivery.last_status_code}{took}"
    elif delivery.last_error:
        why = f"{delivery.last_error}{took}"
    else:
        why = "no attempt could be made"
    then = (
        "It is tried again on the retry schedule."
        if delivery.status is DeliveryStatus.PENDING
        else "Nothing more is tried; send it again from its details."
    )
    return f"Not delivered: {why}. {then}"


def _back(
    visitor: Visitor, project_id: str, webhook_id: str, notice: str, anchor: str = ""
) -> Response:
    visitor.tell(notice)
    return see_other(f"/projects/{project_id}/webhooks/{webhook_id}{anchor}")


@router.post("/projects/{project_id}/webhooks/{webhook_id}")
async def edit_webhook(request: Request, project_id: str, webhook_id: str) -> Response:
    visitor, db, access = await _admin(request, project_id)
    fields = await _form(request)
    try:
        body = parse_form(WebhookUpdate, fields)
        assert isinstance(body, WebhookUpdate)
        async with db.begin_nested():
            await webhook_service(get_context(request), db).update(
                access.project, webhook_id, body.model_dump(exclude_none=True),
                by=actor_of(access),
            )  # fmt: skip
    except FormError as exc:
        return await _webhook(request, visitor, db, access, webhook_id, values=fields,
                              errors=_errors(exc), status_code=422)  # fmt: skip
    except BuildbayError as exc:
        if exc.status >= 500 or exc.status == 404:
            raise
        return await _webhook(request, visitor, db, access, webhook_id, values=fields,
                              errors=domain_field_errors(exc, "url"),
                              status_code=exc.status)  # fmt: skip
    return _back(visitor, project_id, webhook_id, "Webhook saved.")


@router.post("/projects/{project_id}/webhooks/{webhook_id}/enable")
async def enable_webhook(request: Request, project_id: str, webhook_id: str) -> Response:
    visitor, db, access = await _admin(request, project_id)
    await webhook_service(get_context(request), db).update(
        access.project, webhook_id, {"enabled": True}, by=actor_of(access)
    )
    return _back(visitor, project_id, webhook_id, "Webhook enabled.")


@router.post("/projects/{project_id}/webhooks/{webhook_id}/disable")
async def disable_webhook(request: Request, project_id: str, webhook_id: str) -> Response:
    visitor, db, access = await _admin(request, project_id)
    await webhook_service(get_context(request), db).update(
        access.project, webhook_id, {"enabled": False}, by=actor_of(access)
    )
    return _back(visitor, project_id, webhook_id, "Webhook disabled: nothing is sent to it.")


@router.post("/projects/{project_id}/webhooks/{webhook_id}/rotate")
async def rotate_secret(request: Request, project_id: str, webhook_id: str) -> Response:
    visitor, db, access = await _admin(request, project_id)
    secret = await webhook_service(get_context(request), db).rotate_secret(
        access.project, webhook_id, by=actor_of(access)
    )
    await shown_once.keep(sessions(request), visitor, db, now(request), Shown.WEBHOOK,
                          webhook_id, secret)  # fmt: skip
    return _back(visitor, project_id, webhook_id,
                 "New secret made: the previous one also signs for 24 hours.")  # fmt: skip


@router.post("/projects/{project_id}/webhooks/{webhook_id}/test")
async def send_test(request: Request, project_id: str, webhook_id: str) -> Response:
    visitor, db, access = await _admin(request, project_id)
    delivery = await webhook_service(get_context(request), db).send_test(access.project, webhook_id)
    visitor.tell("Test event sent.")
    return see_other(
        f"/projects/{project_id}/webhooks/{webhook_id}?test={delivery.id}#test-outcome"
    )


@router.get("/projects/{project_id}/webhooks/{webhook_id}/deliveries/{delivery_id}/outcome")
async def delivery_outcome(
    request: Request, project_id: str, webhook_id: str, delivery_id: str
) -> Response:
    """`{"known", "text"}`: the page's script asks until the outcome is known."""
    _, db, access = await _admin(request, project_id)
    reads = Reads.within(db)
    webhook = await webhook_of(reads, access.project.id, webhook_id)
    delivery = (await delivery_detail(reads, webhook.id, delivery_id)).delivery
    return JSONResponse(
        {"known": _known(delivery), "text": outcome_text(delivery)},
        headers={"Cache-Control": "no-store"},
    )


@router.post("/projects/{project_id}/webhooks/{webhook_id}/delete")
async def delete_webhook(request: Request, project_id: str, webhook_id: str) -> Response:
    _, db, access = await _admin(request, project_id)
    await webhook_service(get_context(request), db).delete(
        access.project, webhook_id, by=actor_of(access)
    )
    return see_other(f"/projects/{project_id}/webhooks")


@router.get("/projects/{project_id}/webhooks/{webhook_id}/deliveries/{delivery_id}")
async def delivery_page(
    request: Request, project_id: str, webhook_id: str, delivery_id: str
) -> Response:
    visitor, db, access = await _admin(request, project_id)
    reads = Reads.within(db)
    webhook = await webhook_of(reads, access.project.id, webhook_id)
    detail = await delivery_detail(reads, webhook.id, delivery_id)
    payload = json.dumps(json.loads(detail.payload), indent=2, ensure_ascii=False)
    return page("console/webhook_delivery.html", visitor, project=access.project,
                webhook=webhook, detail=detail, payload=payload)  # fmt: skip


@router.post("/projects/{project_id}/webhooks/{webhook_id}/deliveries/{delivery_id}/retry")
async def retry_delivery(
    request: Request, project_id: str, webhook_id: str, delivery_id: str
) -> Response:
    visitor, db, access = await _admin(request, project_id)
    await webhook_service(get_context(request), db).retry(access.project, webhook_id, delivery_id)
    visitor.tell("Sent again: reload to see the new attempt.")
    return see_other(f"/projects/{project_id}/webhooks/{webhook_id}/deliveries/{delivery_id}")


@router.get("/projects/{project_id}/webhooks/{webhook_id}/preview")
async def preview_page(request: Request, project_id: str, webhook_id: str) -> Response:
    """The webhook's message for a real build of the project (`?build=`: one of its latest
    ready builds; its latest by default), in its format or another (`?format=`), measured
    against the target's documented limits."""
    visitor, db, access = await _admin(request, project_id)
    ctx = get_context(request)
    reads = Reads.within(db)
    webhook = await webhook_of(reads, access.project.id, webhook_id)
    asked = request.query_params.get("format")
    fmt = WebhookFormat(asked) if asked in {f.value for f in WebhookFormat} else webhook.format
    shown = await preview(db, build_reads(ctx, reads), access.project, fmt,
                          request.query_params.get("build"),
                          ctx.settings.resolved_public_url, now(request))  # fmt: skip
    return page("console/webhook_preview.html", visitor, project=access.project,
                webhook=webhook, preview=shown, formats=FORMATS)  # fmt: skip

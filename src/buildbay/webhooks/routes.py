from __future__ import annotations

import json
from typing import Annotated

from fastapi import APIRouter, Path, Response, status

from buildbay.audit.record import actor_of
from buildbay.deps import Page, ReadsDep, TransactionRoute
from buildbay.problems import problem_responses
from buildbay.projects.access import ProjectAdmin, ProjectAdminReader
from buildbay.schemas import PAGE_QUERY
from buildbay.webhooks import schemas
from buildbay.webhooks.chat import suggested_format
from buildbay.webhooks.dependencies import Service
from buildbay.webhooks.reads import (
    DeliveryDetail,
    DeliveryRecord,
    WebhookRecord,
    deliveries_of,
    delivery_detail,
    webhook_of,
    webhooks_of,
)

router = APIRouter(
    prefix="/api/projects/{id}/webhooks", tags=["webhooks"], route_class=TransactionRoute
)


# A delivery named by its id alone, as the delivery log and the CLI show it.
deliveries_router = APIRouter(
    prefix="/api/projects/{id}/webhook-deliveries", tags=["webhooks"], route_class=TransactionRoute
)


WebhookId = Annotated[str, Path(alias="webhookId")]
DeliveryId = Annotated[str, Path(alias="deliveryId")]


def webhook_schema(webhook: WebhookRecord) -> schemas.Webhook:
    return schemas.Webhook(
        id=webhook.id,
        url=webhook.url,
        events=webhook.events,
        description=webhook.description,
        format=webhook.format,
        suggested_format=suggested_format(webhook.url),
        enabled=webhook.enabled,
        disabled_reason=webhook.disabled_reason,
        created_at=webhook.created_at,
        failing_since=webhook.failing_since,
        last_delivery_at=webhook.last_delivery_at,
    )


def _delivery_fields(d: DeliveryRecord) -> dict[str, object]:
    return {
        "id": d.id,
        "event_id": d.event_id,
        "event_type": d.event_type,
        "status": d.status,
        "attempts": d.attempts,
        "next_attempt_at": d.next_attempt_at,
        "last_status_code": d.last_status_code,
        "last_error": d.last_error,
        "last_duration_ms": d.last_duration_ms,
        "created_at": d.created_at,
        "delivered_at": d.delivered_at,
    }


def delivery_schema(d: DeliveryRecord) -> schemas.Delivery:
    return schemas.Delivery.model_validate(_delivery_fields(d))


def delivery_detail_schema(detail: DeliveryDetail) -> schemas.DeliveryDetail:
    return schemas.DeliveryDetail.model_validate(
        {
            **_delivery_fields(detail.delivery),
            "payload": json.loads(detail.payload),
            "last_response_body": detail.last_response_body,
            "history": [
                {
                    "attempted_at": a.attempted_at,
                    "status_code": a.status_code,
                    "error": a.error,
                    "duration_ms": a.duration_ms,
                }
                for a in detail.attempts
            ],
        }
    )


@router.get(
    "",
    responses=problem_responses(401, 403, 404, 429),
    summary="The project's webhooks, oldest first (admin+)",
)
async def list_webhooks(access: ProjectAdminReader, reads: ReadsDep) -> schemas.WebhookList:
    hooks = await webhooks_of(reads, access.project.id)
    return schemas.WebhookList(webhooks=[webhook_schema(h) for h in hooks])


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    responses=problem_responses(400, 401, 403, 404, 409, 413, 422, 429),
    summary="Add a webhook; its `secret` is shown this once (admin+)",
)
async def create_webhook(
    body: schemas.WebhookCreate, access: ProjectAdmin, service: Service
) -> schemas.WebhookCreated:
    webhook = await service.create(
        access.project, body.url, body.events, body.description, body.format,
        by=actor_of(access),
    )  # fmt: skip
    return schemas.WebhookCreated(**webhook_schema(webhook).model_dump(), secret=webhook.secret)


@router.get(
    "/{webhookId}",
    responses=problem_responses(401, 403, 404, 429),
    summary="A webhook (admin+)",
)
async def get_webhook(
    webhook_id: WebhookId, access: ProjectAdminReader, reads: ReadsDep
) -> schemas.Webhook:
    return webhook_schema(await webhook_of(reads, access.project.id, webhook_id))


@router.put(
    "/{webhookId}",
    responses=problem_responses(400, 401, 403, 404, 413, 422, 429),
    summary="Change a webhook's URL, events, format or description, or enable it again (admin+)",
)
async def update_webhook(
    webhook_id: WebhookId, body: schemas.WebhookUpdate, access: ProjectAdmin, service: Service
) -> schemas.Webhook:
    changes = body.model_dump(exclude_unset=True)
    for field in ("url", "events", "enabled", "description", "format"):
        if field in changes and changes[field] is None:
            del changes[field]
    return webhook_schema(
        await service.update(access.project, webhook_id, changes, by=actor_of(access))
    )


@router.delete(
    "/{webhookId}",
    status_code=status.HTTP_204_NO_CONTENT,
    responses=problem_responses(401, 403, 404, 429),
    summary="Delete a webhook and its delivery log (admin+)",
)
async def delete_webhook(webhook_id: WebhookId, access: ProjectAdmin, service: Service) -> Response:
    await service.delete(access.project, webhook_id, by=actor_of(access))
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post(
    "/{webhookId}/rotate-secret",
    responses=problem_responses(401, 403, 404, 429),
    summary="A new secret, shown this once; for 24 hours both sign each message (admin+)",
)
async def rotate_secret(
    webhook_id: WebhookId, access: ProjectAdmin, service: Service
) -> schemas.WebhookSecret:
    return schemas.WebhookSecret(
        secret=await service.rotate_secret(access.project, webhook_id, by=actor_of(access))
    )


@router.post(
    "/{webhookId}/test",
    status_code=status.HTTP_202_ACCEPTED,
    responses=problem_responses(401, 403, 404, 409, 429),
    summary="Send a `webhook.test` event to this webhook (admin+)",
)
async def send_test(
    webhook_id: WebhookId, access: ProjectAdmin, service: Service
) -> schemas.DeliveryAccepted:
    delivery = await service.send_test(access.project, webhook_id)
    return schemas.DeliveryAccepted(delivery_id=delivery.id)


@router.get(
    "/{webhookId}/deliveries",
    responses=problem_responses(401, 403, 404, 422, 429),
    summary="The webhook's deliveries, newest first (admin+)",
    openapi_extra=PAGE_QUERY,
)
async def list_deliveries(
    webhook_id: WebhookId, access: ProjectAdminReader, reads: ReadsDep, page: Page
) -> schemas.DeliveryList:
    webhook = await webhook_of(reads, access.project.id, webhook_id)
    rows, next_cursor = await deliveries_of(reads, webhook.id, page.limit, page.after_id)
    return schemas.DeliveryList(
        deliveries=[delivery_schema(d) for d in rows], next_cursor=next_cursor
    )


@router.get(
    "/{webhookId}/deliveries/{deliveryId}",
    responses=problem_responses(401, 403, 404, 429),
    summary="A delivery, with its body, every attempt and the last answer's first 1 KiB (admin+)",
)
async def get_delivery(
    webhook_id: WebhookId, delivery_id: DeliveryId, access: ProjectAdminReader, reads: ReadsDep
) -> schemas.DeliveryDetail:
    webhook = await webhook_of(reads, access.project.id, webhook_id)
    return delivery_detail_schema(await delivery_detail(reads, webhook.id, delivery_id))


@router.post(
    "/{webhookId}/deliveries/{deliveryId}/retry",
    status_code=status.HTTP_202_ACCEPTED,
    responses=problem_responses(401, 403, 404, 409, 429),
    summary="Send a delivery again now, with the same `webhook-id` and body (admin+)",
)
async def retry_delivery(
    webhook_id: WebhookId, delivery_id: DeliveryId, access: ProjectAdmin, service: Service
) -> schemas.DeliveryAccepted:
    await service.retry(access.project, webhook_id, delivery_id)
    return schemas.DeliveryAccepted(delivery_id=delivery_id)


@deliveries_router.post(
    "/{deliveryId}/retry",
    status_code=status.HTTP_202_ACCEPTED,
    responses=problem_responses(401, 403, 404, 409, 429),
    summary="Send a delivery (of any of the project's webhooks) again now (admin+)",
)
async def retry_delivery_by_id(
    delivery_id: DeliveryId, access: ProjectAdmin, service: Service
) -> schemas.DeliveryAccepted:
    await service.retry_delivery(access.project, delivery_id)
    return schemas.DeliveryAccepted(delivery_id=delivery_id)

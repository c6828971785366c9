"""An application's trusted publishers (admin+), and the exchange of a CI's ID token for an
upload-only token (no credential but the ID token itself)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request, Response, status

from buildbay.auth.dependencies import client_ip, count_budget, limit_by_ip, origin_of
from buildbay.deps import Context, Page, ReadsDep, TransactionRoute
from buildbay.problems import problem_responses
from buildbay.projects.access import AppAdmin, AppAdminReader
from buildbay.publishers import schemas
from buildbay.publishers.dependencies import Service
from buildbay.publishers.reads import publishers_page
from buildbay.schemas import PAGE_QUERY

router = APIRouter(
    prefix="/api/projects/{id}/applications/{appId}/trusted-publishers",
    tags=["trusted publishers"],
    route_class=TransactionRoute,
)
exchange_router = APIRouter(prefix="/api/auth", tags=["auth"], route_class=TransactionRoute)

PublisherId = Annotated[str, Path(alias="publisherId", max_length=32)]


@router.get(
    "",
    responses=problem_responses(401, 403, 404, 422, 429),
    summary="List the application's trusted publishers (admin+)",
    openapi_extra=PAGE_QUERY,
)
async def list_publishers(
    access: AppAdminReader, reads: ReadsDep, page: Page
) -> schemas.TrustedPublisherList:
    found, next_cursor = await publishers_page(
        reads, access.application.id, page.limit, page.after_id
    )
    return schemas.TrustedPublisherList(
        trusted_publishers=[schemas.publisher_schema(p) for p in found], next_cursor=next_cursor
    )


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    responses=problem_responses(400, 401, 403, 404, 409, 413, 422, 429),
    summary="Trust a CI identity: its ID tokens are exchanged for upload-only tokens (admin+)",
)
async def add_publisher(
    body: schemas.TrustedPublisherCreate, access: AppAdmin, service: Service, request: Request
) -> schemas.TrustedPublisher:
    added = await service.add(
        access, body.issuer, body.subject_pattern, body.audience, origin_of(request)
    )
    return schemas.publisher_schema(added)


@router.delete(
    "/{publisherId}",
    status_code=status.HTTP_204_NO_CONTENT,
    responses=problem_responses(401, 403, 404, 429),
    summary="Stop trusting a CI identity; its exchanged tokens stop working (admin+)",
)
async def remove_publisher(
    publisher_id: PublisherId, access: AppAdmin, service: Service, request: Request
) -> Response:
    await service.remove(access, publisher_id, origin_of(request))
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@exchange_router.post(
    "/oidc-exchange",
    responses=problem_responses(400, 401, 403, 413, 422, 429, 503),
    summary="Exchange a CI's OpenID Connect ID token for an upload-only token of the "
    "application named, if one of its trusted publishers takes it (valid 15 minutes)",
)
async def oidc_exchange(
    body: schemas.OidcExchangeRequest, service: Service, ctx: Context, request: Request
) -> schemas.OidcExchangeResponse:
    await limit_by_ip(ctx, request)
    await count_budget(
        ctx, request, f"oidc-exchange:{client_ip(request)}",
        ctx.settings.oidc_exchanges_per_minute_per_ip, "oidc-exchange",
        "More than {limit} ID-token exchanges in a minute from this address (oidc-exchange)",
    )  # fmt: skip
    exchanged = await service.exchange(body.token, body.application_id, origin_of(request))
    return schemas.OidcExchangeResponse(
        token=exchanged.token,
        expires_at=exchanged.expires_at,
        application_id=exchanged.application_id,
        project_id=exchanged.project_id,
    )

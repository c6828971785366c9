"""Liveness and readiness, for load balancers and orchestrators."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from buildbay.db.engine import check_database
from buildbay.deps import Context, TransactionRoute
from buildbay.problems import PROBLEM_CONTENT_TYPE, problem_body, request_id_of
from buildbay.storage.base import StorageError

router = APIRouter(tags=["health"], route_class=TransactionRoute)

CheckState = Literal["ok", "failing", "degraded"]


class Liveness(BaseModel):
    status: Literal["ok"] = "ok"


class Readiness(BaseModel):
    status: Literal["ready"] = "ready"
    checks: dict[str, CheckState]


@router.get("/healthz", summary="The process is up")
async def healthz() -> Liveness:
    return Liveness()


@router.get(
    "/readyz",
    summary="The database (writable) and the build store are reachable",
    response_model=Readiness,
    responses={
        503: {
            "description": "A dependency is down; `checks` says which",
            "content": {PROBLEM_CONTENT_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}},
        }
    },
)
async def readyz(ctx: Context, request: Request) -> Readiness | JSONResponse:
    checks: dict[str, CheckState] = {}
    try:
        await check_database(ctx.engine)
        checks["database"] = "ok"
    except Exception:
        checks["database"] = "failing"
    try:
        await ctx.storage.check()
        checks["storage"] = "ok"
    except StorageError:
        checks["storage"] = "failing"
    if ctx.settings.redis_url and ctx.settings.rate_limit_enabled:
        checks["rateLimitStore"] = "ok" if await ctx.limiter.check() else "degraded"
    failing = [name for name, state in checks.items() if state == "failing"]
    if failing:
        body = problem_body(
            503,
            "not_ready",
            f"Not ready: {', '.join(failing)} unreachable",
            request_id_of(request),
        )
        body["checks"] = checks
        return JSONResponse(
            body, status_code=503, media_type=PROBLEM_CONTENT_TYPE, headers={"Retry-After": "5"}
        )
    return Readiness(checks=checks)

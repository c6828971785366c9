"""A project's mapping of the identity provider's groups to roles (sso/groups.py)."""

from __future__ import annotations

from fastapi import APIRouter, Request

from buildbay.auth.dependencies import origin_of
from buildbay.deps import Context, ReadsDep, SessionDep, TransactionRoute
from buildbay.problems import problem_responses
from buildbay.projects.access import ProjectAdmin, ProjectAdminReader
from buildbay.projects.enums import ProjectRole
from buildbay.sso import schemas
from buildbay.sso.groups import GroupMapping, read_mappings, replace_mappings

router = APIRouter(
    prefix="/api/projects/{id}/sso-groups", tags=["projects"], route_class=TransactionRoute
)


def _answer(ctx_claim: str | None, mappings: list[GroupMapping]) -> schemas.SsoGroups:
    return schemas.SsoGroups(
        mappings=[schemas.SsoGroupMapping(group=m.group, role=m.role.value) for m in mappings],
        groups_claim=ctx_claim,
    )


@router.get(
    "",
    responses=problem_responses(401, 403, 404, 429),
    summary="Which of the identity provider's groups give which role here (admin+)",
)
async def get_sso_groups(
    access: ProjectAdminReader, reads: ReadsDep, ctx: Context
) -> schemas.SsoGroups:
    mappings = await read_mappings(reads, access.project.id)
    return _answer(ctx.settings.oidc_groups_claim, mappings)


@router.put(
    "",
    responses=problem_responses(400, 401, 403, 404, 413, 422, 429),
    summary="Set which of the identity provider's groups give which role here, applied at each "
    "member's next sign-in through it (admin+)",
)
async def put_sso_groups(
    body: schemas.SsoGroupsUpdate,
    access: ProjectAdmin,
    db: SessionDep,
    ctx: Context,
    request: Request,
) -> schemas.SsoGroups:
    wanted = [GroupMapping(m.group, ProjectRole(m.role)) for m in body.mappings]
    saved = await replace_mappings(db, ctx.clock.now(), access, wanted, origin_of(request))
    return _answer(ctx.settings.oidc_groups_claim, saved)

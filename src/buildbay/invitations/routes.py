from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Path, Response, status

from buildbay.audit.record import actor_of
from buildbay.auth.dependencies import InteractiveUser
from buildbay.deps import Context, ReadsDep, TransactionRoute
from buildbay.invitations import schemas
from buildbay.invitations.dependencies import Service
from buildbay.invitations.models import Invitation
from buildbay.invitations.reads import InvitationRecord, invitations_of
from buildbay.problems import problem_responses
from buildbay.projects.access import ProjectAdmin, ProjectAdminReader
from buildbay.projects.schemas import Member, member_schema

router = APIRouter(tags=["invitations"], route_class=TransactionRoute)


InvitationId = Annotated[str, Path(alias="invitationId")]


def _invitation(invitation: Invitation | InvitationRecord, now: datetime) -> schemas.Invitation:
    return schemas.Invitation(
        id=invitation.id,
        email=invitation.email,
        role=invitation.role,
        status=invitation.status_at(now),
        invited_by=invitation.invited_by,
        created_at=invitation.created_at,
        expires_at=invitation.expires_at,
    )


@router.post(
    "/api/projects/{id}/invitations",
    status_code=status.HTTP_201_CREATED,
    responses=problem_responses(400, 401, 403, 404, 409, 413, 422, 429),
    summary="Invite an e-mail into the project with a role, by mail (admin+; owner to invite an "
    "owner); an e-mail already invited gets a new link. 429 `invitation_limit` past the day's "
    "invitation caps, 409 `invitations_blocked` for an address that refuses invitations",
)
async def invite(
    body: schemas.InvitationCreate, access: ProjectAdmin, service: Service
) -> schemas.Invitation:
    return _invitation(await service.invite(access, str(body.email), body.role), service.now)


@router.get(
    "/api/projects/{id}/invitations",
    responses=problem_responses(401, 403, 404, 429),
    summary="List the project's invitations, newest first (admin+)",
)
async def list_invitations(
    access: ProjectAdminReader, reads: ReadsDep, ctx: Context
) -> schemas.InvitationList:
    invitations = await invitations_of(reads, access.project.id)
    now = ctx.clock.now()
    return schemas.InvitationList(invitations=[_invitation(i, now) for i in invitations])


@router.delete(
    "/api/projects/{id}/invitations/{invitationId}",
    status_code=status.HTTP_204_NO_CONTENT,
    responses=problem_responses(401, 403, 404, 409, 429),
    summary="Revoke an invitation: its link stops working (admin+)",
)
async def revoke_invitation(
    invitation_id: InvitationId, access: ProjectAdmin, service: Service
) -> Response:
    await service.revoke(access.project, invitation_id, by=actor_of(access))
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post(
    "/api/invitations/accept",
    responses=problem_responses(400, 401, 403, 404, 409, 413, 422, 429),
    summary="Accept an invitation with its link's token: you join the project (a login, signed "
    "in with the invited e-mail)",
)
async def accept_invitation(
    body: schemas.InvitationAccept, principal: InteractiveUser, service: Service
) -> Member:
    if body.token is not None:
        return member_schema(await service.accept(principal, body.token))
    return member_schema(await service.accept_received(principal, body.invitation_id or ""))


@router.post(
    "/api/invitations/decline",
    status_code=status.HTTP_204_NO_CONTENT,
    responses=problem_responses(400, 401, 403, 404, 413, 422, 429),
    summary="Decline an invitation, by its link's token or its id: its links stop working (a "
    "login, signed in with the invited e-mail; by id, that address verified)",
)
async def decline_invitation(
    body: schemas.InvitationAccept, principal: InteractiveUser, service: Service
) -> Response:
    await service.decline(principal, token=body.token, invitation_id=body.invitation_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get(
    "/api/account/invitations",
    responses=problem_responses(401, 403, 429),
    summary="Your pending invitations, newest first (a login; none until your e-mail address "
    "is verified): accept or decline each by its id",
)
async def received_invitations(
    principal: InteractiveUser, service: Service
) -> schemas.ReceivedInvitationList:
    received = await service.received(principal)
    return schemas.ReceivedInvitationList(
        invitations=[
            schemas.ReceivedInvitation(
                id=i.id,
                project_id=i.project_id,
                project_name=i.project_name,
                role=i.role,
                invited_by_name=i.inviter,
                created_at=i.created_at,
                expires_at=i.expires_at,
            )
            for i in received
        ]
    )

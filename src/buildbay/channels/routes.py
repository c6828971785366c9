from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Response, status

from buildbay.channels import schemas
from buildbay.channels.dependencies import Service
from buildbay.channels.reads import ChannelView, channels_of
from buildbay.deps import ReadsDep, TransactionRoute
from buildbay.problems import problem_responses
from buildbay.projects.access import AppDeveloper, AppReader
from buildbay.projects.authorization import tester_of

router = APIRouter(
    prefix="/api/projects/{id}/applications/{appId}/channels",
    tags=["channels"],
    route_class=TransactionRoute,
)


def to_schema(view: ChannelView) -> schemas.Channel:
    return schemas.Channel(
        id=view.channel.id,
        name=view.channel.name,
        builds_count=view.builds_count,
        latest_build_id=view.latest_build_id,
        created_at=view.channel.created_at,
    )


@router.get(
    "",
    responses=problem_responses(401, 403, 404, 429),
    summary="The application's release channels, by name",
)
async def list_channels(access: AppReader, reads: ReadsDep) -> schemas.ChannelList:
    views = await channels_of(reads, access.application.id, tester_of(access))
    return schemas.ChannelList(channels=[to_schema(v) for v in views])


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    responses=problem_responses(400, 401, 403, 404, 409, 413, 422, 429),
    summary="Create a release channel (developer+)",
)
async def create_channel(
    body: schemas.ChannelCreate, access: AppDeveloper, service: Service
) -> schemas.Channel:
    return to_schema(await service.create(access.application.id, body.name))


@router.delete(
    "/{channelId}",
    status_code=status.HTTP_204_NO_CONTENT,
    responses=problem_responses(401, 403, 404, 409, 429),
    summary="Delete a release channel; its builds stay (developer+; not `default`)",
)
async def delete_channel(
    channel_id: Annotated[str, Path(alias="channelId")], access: AppDeveloper, service: Service
) -> Response:
    await service.delete(access.application.id, channel_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)

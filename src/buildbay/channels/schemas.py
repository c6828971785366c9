from __future__ import annotations

from typing import Annotated

from pydantic import Field

from buildbay.channels.reads import NAME_MAX, NAME_PATTERN
from buildbay.schemas import ApiModel, RequestModel, Timestamp

ChannelName = Annotated[
    str,
    Field(
        min_length=1,
        max_length=NAME_MAX,
        pattern=NAME_PATTERN,
        examples=["beta"],
        description="1 to 40 characters of a-z, 0-9, `.`, `_` and `-`",
    ),
]
MAX_CHANNELS_OF_BUILD = 20
ChannelNames = Annotated[list[ChannelName], Field(max_length=MAX_CHANNELS_OF_BUILD)]


class ChannelCreate(RequestModel):
    name: ChannelName


class Channel(ApiModel):
    id: str
    name: str
    builds_count: int = Field(description="Ready builds published to the channel")
    latest_build_id: str | None = Field(description="Its newest ready build")
    created_at: Timestamp


class ChannelList(ApiModel):
    channels: list[Channel]

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar

from pydantic import AfterValidator, Field

from buildbay.channels.names import NAME_MAX, NAME_PATTERN
from buildbay.schemas import ApiModel, RequestModel, Timestamp

NAME_RULE = (
    "a channel's name is 1 to 40 characters: lowercase letters, digits, dots, dashes and "
    "underscores (for example beta or qa-2)"
)


def _channel_name(value: str) -> str:
    """One sentence for every way a name can be wrong (pydantic's own would quote the regex)."""
    if not re.fullmatch(NAME_PATTERN, value):
        raise ValueError(NAME_RULE)
    return value


ChannelName = Annotated[
    str,
    Field(
        examples=["beta"],
        description="1 to 40 characters of a-z, 0-9, `.`, `_` and `-`",
        json_schema_extra={"minLength": 1, "maxLength": NAME_MAX, "pattern": NAME_PATTERN},
    ),
    AfterValidator(_channel_name),
]
MAX_CHANNELS_OF_BUILD = 20
ChannelNames = Annotated[list[ChannelName], Field(max_length=MAX_CHANNELS_OF_BUILD)]


class ChannelCreate(RequestModel):
    EXAMPLE: ClassVar[dict[str, Any] | None] = {"name": "beta"}

    name: ChannelName


class Channel(ApiModel):
    id: str
    name: str
    builds_count: int = Field(
        description="Ready builds published to the channel (a tester's: those given to them)"
    )
    latest_build_id: str | None = Field(
        description="Its newest ready build (a tester's: of those given to them)"
    )
    created_at: Timestamp


class ChannelList(ApiModel):
    channels: list[Channel]

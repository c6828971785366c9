"""Shared schema pieces: camelCase models, strict request bodies, timestamps, pagination."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Annotated

from fastapi import Depends, Query
from pydantic import BaseModel, ConfigDict, PlainSerializer, WithJsonSchema
from pydantic.alias_generators import to_camel

from buildbay.clock import isoformat_z
from buildbay.errors import ValidationFailed
from buildbay.ids import InvalidCursorError, decode_cursor

Timestamp = Annotated[
    datetime,
    PlainSerializer(isoformat_z, return_type=str),
    WithJsonSchema({"type": "string", "format": "date-time", "example": "2026-11-22T04:19:53Z"}),
]


class ApiModel(BaseModel):
    """A response body: camelCase field names, as the seed writes them."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, from_attributes=True)


class RequestModel(BaseModel):
    """A request body: unknown fields are refused (no mass assignment), strings are trimmed."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=False,
        extra="forbid",
        str_strip_whitespace=True,
    )


DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 100


@dataclass(frozen=True, slots=True)
class PageParams:
    """`?limit=` and `?cursor=` of every list; the cursor is the last id of the previous page."""

    limit: int
    after_id: str | None


PageLimit = Annotated[int, Query(ge=1, le=MAX_PAGE_SIZE, description="Items per page (1..100)")]
PageCursor = Annotated[
    str | None, Query(max_length=200, description="`nextCursor` of the previous page")
]


def page_of(limit: int, cursor: str | None) -> PageParams:
    after_id = None
    if cursor:
        try:
            after_id = decode_cursor(cursor)
        except InvalidCursorError:
            raise ValidationFailed.for_field(
                "cursor", "is not a cursor this API gave out", code="invalid_cursor"
            ) from None
    return PageParams(limit, after_id)


async def page_params(
    limit: PageLimit = DEFAULT_PAGE_SIZE, cursor: PageCursor = None
) -> PageParams:
    # `async def`: FastAPI runs a plain `def` (or class) dependency in a worker thread.
    return page_of(limit, cursor)


# Routes that must be quick take `limit: PageLimit` and `cursor: PageCursor` themselves and call
# page_of: the same query parameters, without a dependency for FastAPI to solve.
Page = Annotated[PageParams, Depends(page_params)]

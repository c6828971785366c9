"""Shared schema pieces: camelCase models, strict request bodies, timestamps, pagination."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any

import email_validator
from fastapi import Depends, Request
from pydantic import AfterValidator, BaseModel, ConfigDict, WithJsonSchema
from pydantic.alias_generators import to_camel

from buildbay.clock import utc_whole_seconds
from buildbay.errors import ValidationFailed
from buildbay.ids import InvalidCursorError, decode_cursor

# A self-hosted service serves internal domains too: `dev@corp.local`, `qa@team.test`. The
# e-mail validator refuses such special-use names by default (its documented switch).
email_validator.SPECIAL_USE_DOMAIN_NAMES.clear()

# Normalised when the model is built, then written by pydantic's own serializer, which gives
# `2026-11-22T04:19:53Z` for a whole-second UTC datetime: a Python serializer per timestamp cost
# a list of ten projects a tenth of its time.
Timestamp = Annotated[
    datetime,
    AfterValidator(utc_whole_seconds),
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
MAX_CURSOR_LENGTH = 200


@dataclass(frozen=True, slots=True)
class PageParams:
    """`?limit=` and `?cursor=` of every list; the cursor is the last id of the previous page."""

    limit: int
    after_id: str | None


# What `Page` reads, for the OpenAPI document: each list route passes it as `openapi_extra`.
PAGE_QUERY: dict[str, Any] = {
    "parameters": [
        {
            "name": "limit",
            "in": "query",
            "required": False,
            "description": f"Items per page (1..{MAX_PAGE_SIZE})",
            "schema": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_PAGE_SIZE,
                "default": DEFAULT_PAGE_SIZE,
            },
        },
        {
            "name": "cursor",
            "in": "query",
            "required": False,
            "description": "`nextCursor` of the previous page",
            "schema": {"type": "string", "maxLength": MAX_CURSOR_LENGTH},
        },
    ]
}


def page_of(limit: str | None, cursor: str | None) -> PageParams:
    """The page that `?limit=` and `?cursor=` ask for, or 422 naming the parameter."""
    size = DEFAULT_PAGE_SIZE
    if limit is not None:
        if not (limit.isascii() and limit.isdigit() and 1 <= int(limit) <= MAX_PAGE_SIZE):
            raise ValidationFailed.for_field(
                "limit", f"must be a whole number from 1 to {MAX_PAGE_SIZE}"
            )
        size = int(limit)
    after_id = None
    if cursor:
        try:
            if len(cursor) > MAX_CURSOR_LENGTH:
                raise InvalidCursorError
            after_id = decode_cursor(cursor)
        except InvalidCursorError:
            raise ValidationFailed.for_field(
                "cursor", "is not a cursor this API gave out", code="invalid_cursor"
            ) from None
    return PageParams(size, after_id)


async def page_params(request: Request) -> PageParams:
    # Read from the query string here rather than declared as two `Query` parameters: FastAPI's
    # per-parameter machinery cost the most polled list more than its database query. Routes
    # document the parameters with `openapi_extra=PAGE_QUERY`.
    query = request.query_params
    return page_of(query.get("limit"), query.get("cursor"))


Page = Annotated[PageParams, Depends(page_params)]

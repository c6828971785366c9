"""Shared schema pieces: camelCase models, strict request bodies, timestamps, pagination."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, ClassVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    EmailStr,
    Field,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    WithJsonSchema,
    field_validator,
)
from pydantic.alias_generators import to_camel
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import PydanticCustomError, core_schema

from buildbay.clock import utc_whole_seconds
from buildbay.errors import ValidationFailed
from buildbay.ids import InvalidCursorError, decode_cursor
from buildbay.numbers import whole_number
from buildbay.text import (
    NAME_MAX,
    NAME_PATTERN,
    NO_ENCODED_WORD_LOOKAHEAD,
    WHITESPACE,
    WHITESPACE_CLASS,
    email_look_alike_problem,
    email_mailable_problem,
    encoded_word_problem,
    normal_email_text,
    shown_text_problem,
)

__all__ = ["WHITESPACE", "WHITESPACE_CLASS"]  # re-exported for the schemas of each domain

# Normalised when the model is built, then written by pydantic's own serializer, which gives
# `2026-11-22T04:19:53Z` for a whole-second UTC datetime: a Python serializer per timestamp
# costs every list a call per row and column (docs/performance.md).
Timestamp = Annotated[
    datetime,
    AfterValidator(utc_whole_seconds),
    WithJsonSchema({"type": "string", "format": "date-time", "example": "2026-11-22T04:19:53Z"}),
]


def _whole_number(value: object) -> object:
    # JSON has one kind of number, and JSON Schema's (so OpenAPI's) `integer` is any number
    # without a fraction: 3.0 is the integer 3. Strings and booleans stay refused (Strict).
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


# An integer field of a request body as the OpenAPI document's `type: integer` promises it:
# `Annotated[int, Field(..., strict=True), JsonInteger]`, last so that the document shows the
# constraints before it as `minimum` and `maximum`.
JsonInteger = BeforeValidator(_whole_number)


# Text never holds NUL (U+0000): PostgreSQL cannot store it, nor compare with it.
NUL = "\x00"
NO_NUL_PATTERN = "^[^\\u0000]*$"
# Not blank, and no NUL.
NOT_BLANK_PATTERN = f"^[^\\u0000]*[^\\u0000{WHITESPACE_CLASS}][^\\u0000]*$"


@dataclass(frozen=True, slots=True)
class Trimmed:
    """Free text (a name, notes): checked as sent, then trimmed of surrounding whitespace.

    As sent, so that the document's `maxLength` means what the server checks. Unless
    `blank_ok`, text that is only whitespace is refused, and the document says so with a
    pattern (`NOT_BLANK_PATTERN`). A `shown` name (people read it on pages and install
    prompts, mails in their subject) also meets buildbay.text's rules: no control or
    bidirectional-control character, no `=?` (RFC 2047's encoded word), and something visible
    (not only zero-width characters); its pattern says so. Request bodies
    are otherwise taken as sent: an identifier with a space around it does not match its
    pattern.
    """

    blank_ok: bool = False
    shown: bool = False

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_after_validator_function(self._trim, handler(source))

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        json_schema = handler(schema)
        if self.shown:
            blank = f"^[{WHITESPACE_CLASS}]*$|" if self.blank_ok else ""
            json_schema["pattern"] = blank + NAME_PATTERN
        elif not self.blank_ok:
            # A field with a pattern of its own has one that says "not blank" too.
            json_schema.setdefault("pattern", NOT_BLANK_PATTERN)
        return json_schema

    def _trim(self, value: str) -> str:
        trimmed = value.strip(WHITESPACE)
        if not trimmed:
            if self.blank_ok:
                return trimmed
            raise ValueError("cannot be blank")
        if self.shown and (problem := shown_text_problem(trimmed) or encoded_word_problem(trimmed)):
            raise ValueError(problem)
        return trimmed


# The name of a project, an application, an API token: 1..100 characters as sent, shown.
Name = Annotated[str, Field(min_length=1, max_length=NAME_MAX), Trimmed(shown=True)]


def _email_as_sent(value: object) -> object:
    # An identifier: taken as sent (docs/api.md), so a space around it is refused rather than
    # trimmed; then compatibility-normalised: a fullwidth a (U+FF41) is the `a` it looks like.
    if isinstance(value, str):
        if value != value.strip(WHITESPACE):
            raise ValueError("cannot start or end with whitespace")
        return normal_email_text(value)
    return value


def _no_look_alikes(value: str) -> str:
    if problem := email_look_alike_problem(value):
        raise ValueError(problem)
    return value


def _mailable(value: str) -> str:
    if problem := email_mailable_problem(value):
        # A kind of its own: the console says this reason, not "enter a valid address".
        raise PydanticCustomError("unmailable_email", problem)
    return value


# An e-mail address a client gives (to register, to add a member): valid, normalised (NFKC,
# lower case), not mixing Latin letters with Cyrillic or Greek look-alikes, and one that mail
# can reach (an ASCII name before the @, no `=?`; an internationalised domain is mailed in its
# ASCII form).
Email = Annotated[
    EmailStr,
    BeforeValidator(_email_as_sent),
    AfterValidator(_no_look_alikes),
    AfterValidator(_mailable),
    WithJsonSchema(
        {
            "type": "string",
            "format": "email",
            "pattern": f"^{NO_ENCODED_WORD_LOOKAHEAD}[^\\u0000]*$",
        }
    ),
]


class ApiModel(BaseModel):
    """A response body: camelCase field names, as the seed writes them."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, from_attributes=True)


def _no_nul_in_the_document(schema: dict[str, Any]) -> None:
    """Every string property of the body says that it holds no NUL (one with a pattern of its
    own has one that excludes NUL already)."""
    for prop in schema.get("properties", {}).values():
        for option in [prop, *prop.get("anyOf", [])]:
            if option.get("type") == "string" and "pattern" not in option:
                option["pattern"] = NO_NUL_PATTERN


def _request_schema(schema: dict[str, Any], model: type[BaseModel]) -> None:
    _no_nul_in_the_document(schema)
    example = getattr(model, "EXAMPLE", None)
    if example is not None:
        schema["examples"] = [example]
    if getattr(model, "NOT_EMPTY", False):
        schema["minProperties"] = 1
    if one_of := getattr(model, "ONE_STRING_OF", ()):  # exactly one of these, as a string
        schema["oneOf"] = [
            {"required": [name], "properties": {name: {"type": "string"}}} for name in one_of
        ]


def _not_null_in_the_document(schema: dict[str, Any]) -> None:
    options = [o for o in schema.pop("anyOf", []) if o.get("type") != "null"]
    if len(options) == 1:
        schema.update(options[0])
    schema.pop("default", None)


# Left out, the field keeps its value; null is refused (below). The document says neither null
# nor a default: the None of the Python type only means "left out".
NotNull = Field(default=None, json_schema_extra=_not_null_in_the_document)


class RequestModel(BaseModel):
    """A request body: unknown fields are refused (no mass assignment); free text is `Trimmed`;
    no text holds NUL. `EXAMPLE` is what the API docs show and Swagger's "Try it out" sends as it
    is: realistic, valid (tests/test_openapi.py) and harmless."""

    EXAMPLE: ClassVar[dict[str, Any] | None] = None
    # A body that must name at least one field (an update of optional fields): the document
    # says so (minProperties), and the model's own validator refuses `{}`.
    NOT_EMPTY: ClassVar[bool] = False

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=False,
        extra="forbid",
        json_schema_extra=_request_schema,
    )

    @field_validator("*", mode="before")
    @classmethod
    def _no_nul(cls, value: object) -> object:
        if isinstance(value, str) and NUL in value:
            raise ValueError("cannot contain the NUL character (U+0000)")
        return value


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
        number = whole_number(limit)
        if number is None or not 1 <= number <= MAX_PAGE_SIZE:
            raise ValidationFailed.for_field(
                "limit", f"must be a whole number from 1 to {MAX_PAGE_SIZE}"
            )
        size = number
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

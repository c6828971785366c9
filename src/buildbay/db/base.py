"""Declarative base with a naming convention, so migrations name constraints the same everywhere."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Generic, TypeVar

from sqlalchemy import DateTime, MetaData, String, TypeDecorator
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes on both SQLite (which keeps no zone) and PostgreSQL."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        return value.astimezone(UTC)

    def result_processor(self, dialect: Dialect, coltype: object) -> Callable[[Any], Any] | None:
        if dialect.name == "sqlite":
            # SQLite keeps the text SQLAlchemy wrote (`2026-11-22 04:19:53.000000`, in UTC):
            # parsed in one C call, rather than SQLAlchemy's parser then process_result_value.
            return _utc_from_sqlite_text
        return super().result_processor(dialect, coltype)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _utc_from_sqlite_text(value: str | None) -> datetime | None:
    # The offset appended to the text rather than set with .replace(tzinfo=...): one call, not
    # two, and list endpoints run this twice a row. (fromisoformat gives the UTC singleton.)
    return None if value is None else datetime.fromisoformat(value + "+00:00")


E = TypeVar("E", bound=StrEnum)


class EnumString(TypeDecorator[E], Generic[E]):
    """A StrEnum stored as its plain string value (no database enum type to migrate), in a
    VARCHAR of `length` (20 unless a value needs more)."""

    impl = String
    cache_ok = True

    def __init__(self, enum: type[E], length: int = 20) -> None:
        super().__init__(length)
        self._enum = enum
        self.length = length

    def process_bind_param(self, value: E | str | None, dialect: Dialect) -> str | None:
        return None if value is None else self._enum(value).value

    def process_result_value(self, value: str | None, dialect: Dialect) -> E | None:
        return None if value is None else self._enum(value)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {datetime: UTCDateTime}

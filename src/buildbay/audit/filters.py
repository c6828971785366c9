"""The audit log's filters as a query string gives them (the API's and the console's): a bad
one is a 422 naming it, never a 500 nor a silently empty log."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from buildbay.audit.enums import AuditAction
from buildbay.audit.reads import AuditFilter
from buildbay.errors import ValidationFailed
from buildbay.schemas import NO_NUL_PATTERN
from buildbay.text import normal_email_text

ACTOR_MAX = 320
ACTIONS = tuple(action.value for action in AuditAction)

# For the OpenAPI document (the routes read the query string themselves, as `Page` does).
FILTER_QUERY: list[dict[str, Any]] = [
    {"name": "action", "in": "query", "required": False,
     "description": "Only entries of this action", "schema": {"type": "string", "enum": ACTIONS}},
    {"name": "actor", "in": "query", "required": False,
     "description": "Only entries by this actor: an e-mail, a user id, or `operator`, `system`, "
     "`ci`", "schema": {"type": "string", "maxLength": ACTOR_MAX, "pattern": NO_NUL_PATTERN}},
    {"name": "since", "in": "query", "required": False,
     "description": "Only entries at or after this instant (ISO 8601; a date is its start, UTC)",
     "schema": {"type": "string", "format": "date-time"}},
    {"name": "until", "in": "query", "required": False,
     "description": "Only entries before this instant (ISO 8601; a date includes that whole "
     "day, UTC; before `since`: no entry)", "schema": {"type": "string", "format": "date-time"}},
    {"name": "format", "in": "query", "required": False,
     "description": "`ndjson`: the whole filtered log as one JSON entry a line, for export "
     "(limit and cursor ignored)", "schema": {"type": "string", "enum": ["json", "ndjson"]}},
]  # fmt: skip


def audit_filter_of(query: Mapping[str, str]) -> AuditFilter:
    """The filter that `?action=&actor=&since=&until=` ask for; empty ones are left out."""
    action = query.get("action") or None
    if action is not None and action not in ACTIONS:
        raise ValidationFailed.for_field("action", "is not an action of the audit log")
    actor = (query.get("actor") or "").strip() or None
    if actor is not None:
        if len(actor) > ACTOR_MAX or "\x00" in actor:
            raise ValidationFailed.for_field(
                "actor", f"must be an e-mail, a user id or a kind of at most {ACTOR_MAX} characters"
            )
        if "@" in actor:
            actor = normal_email_text(actor)
    since = _instant(query, "since", end_of_day=False)
    until = _instant(query, "until", end_of_day=True)  # before since: no entry, not an error
    return AuditFilter(action, actor, since, until)


def wants_ndjson(query: Mapping[str, str]) -> bool:
    wanted = query.get("format") or "json"
    if wanted not in ("json", "ndjson"):
        raise ValidationFailed.for_field("format", "must be json or ndjson")
    return wanted == "ndjson"


def _instant(query: Mapping[str, str], field: str, *, end_of_day: bool) -> datetime | None:
    """An ISO 8601 instant (UTC if it names no offset), or a date: its start, or for
    `end_of_day` the start of the next day (so `until=2026-11-28` includes the 28th)."""
    text = (query.get(field) or "").strip()
    if not text:
        return None
    try:
        if len(text) == 10:
            day = date.fromisoformat(text)
            instant = datetime.combine(day, time(), UTC)
            return _shifted(instant, timedelta(days=1) if end_of_day else timedelta(0))
        instant = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValidationFailed.for_field(
            field, "must be an ISO 8601 date (2026-11-28) or date and time (2026-11-28T09:30:00Z)"
        ) from None
    if instant.tzinfo is None:
        return instant.replace(tzinfo=UTC)
    return _shifted(instant.replace(tzinfo=None), -instant.utcoffset())  # type: ignore[operator]


def _shifted(naive_or_utc: datetime, by: timedelta) -> datetime:
    """`naive_or_utc` + `by` in UTC; past the calendar's ends (year 1, year 9999), its end: a
    valid instant is never refused for where its offset takes it."""
    try:
        return (naive_or_utc + by).replace(tzinfo=UTC)
    except OverflowError:
        return (datetime.max if by > timedelta(0) else datetime.min).replace(tzinfo=UTC)

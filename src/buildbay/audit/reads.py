"""Reading the audit log: a project's entries, or an account's (those it did, and those about
it), newest first, filtered, in keyset pages whose cost does not grow with the page's depth
(each is an index range: `(project_id, id)`, `(actor_id, id)`, `(subject_user_id, id)`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Select, select
from sqlalchemy.ext.asyncio import AsyncEngine

from buildbay.audit.models import AuditEntry
from buildbay.db.reads import Reads
from buildbay.ids import encode_cursor

# Who an `?actor=` names: an e-mail (as recorded), a user id, or one of these kinds.
ACTOR_KINDS = ("operator", "system", "ci")
EXPORT_BATCH = 500

_COLUMNS = list(AuditEntry.__table__.columns)


@dataclass(frozen=True, slots=True)
class AuditFilter:
    action: str | None = None
    actor: str | None = None  # an e-mail, a user id, or a kind (ACTOR_KINDS)
    since: datetime | None = None  # inclusive
    until: datetime | None = None  # exclusive

    def conditions(self) -> list[ColumnElement[bool]]:
        found: list[ColumnElement[bool]] = []
        if self.action is not None:
            found.append(AuditEntry.action == self.action)
        if self.actor is not None:
            if self.actor in ACTOR_KINDS:
                found.append(AuditEntry.actor_kind == self.actor)
            elif "@" in self.actor:
                found.append(AuditEntry.actor_email == self.actor)
            else:
                found.append(AuditEntry.actor_id == self.actor)
        if self.since is not None:
            found.append(AuditEntry.at >= self.since)
        if self.until is not None:
            found.append(AuditEntry.at < self.until)
        return found


@dataclass(frozen=True, slots=True)
class AuditScope:
    """Whose log: a project's (`project_id`), or an account's (`user_id`: entries whose actor
    or subject it is)."""

    project_id: str | None = None
    user_id: str | None = None

    def queries(self, only: AuditFilter) -> list[Select[Any]]:
        """One query per index the scope reads (an account's: two, merged)."""
        base = select(*_COLUMNS).where(*only.conditions())
        if self.project_id is not None:
            return [base.where(AuditEntry.project_id == self.project_id)]
        assert self.user_id is not None
        return [
            base.where(AuditEntry.actor_id == self.user_id),
            base.where(AuditEntry.subject_user_id == self.user_id),
        ]

    def shown(self, row: dict[str, Any]) -> dict[str, Any]:
        """`row` as this log shows it. An account's log tells where its own changes came from,
        and a failed sign-in with its address (no actor id), but not where another member
        acted from (the admin who changed one's role): that is the project admins' to read."""
        if self.user_id is None or row["actor_id"] in (None, self.user_id):
            return row
        return row | {"ip": None, "user_agent": None}


async def entries_page(
    reads: Reads, scope: AuditScope, only: AuditFilter, limit: int, after_id: str | None
) -> tuple[list[dict[str, Any]], str | None]:
    """A page of entries (rows as dicts of the table's columns), newest first, and the next
    page's cursor."""
    rows = await _newest(reads, scope, only, limit + 1, after_id)
    page = rows[:limit]
    return page, encode_cursor(page[-1]["id"]) if len(rows) > limit else None


async def _newest(
    reads: Reads, scope: AuditScope, only: AuditFilter, count: int, after_id: str | None
) -> list[dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    for query in scope.queries(only):
        if after_id is not None:
            query = query.where(AuditEntry.id < after_id)
        query = query.order_by(AuditEntry.id.desc()).limit(count)
        for row in await reads.all(query):
            found[row["id"]] = scope.shown(dict(row))
    # An account's two lists, merged (an entry by and about oneself is in both, once here).
    return [found[key] for key in sorted(found, reverse=True)[:count]]


async def every_entry(
    reads: Reads, engine: AsyncEngine, scope: AuditScope, only: AuditFilter
) -> AsyncIterator[list[dict[str, Any]]]:
    """Every entry of the filtered log, newest first, in batches of EXPORT_BATCH. The first is
    read now on the request's `reads` (a database that fails, fails the request with its
    problem, before the answer begins); the others once the answer is under way, each on a
    connection taken and given back before its bytes are sent: an export of a year's log
    holds no connection while a slow client reads it, nor more than a batch in memory."""
    first = await _newest(reads, scope, only, EXPORT_BATCH, None)

    async def batches() -> AsyncIterator[list[dict[str, Any]]]:
        rows = first
        while True:
            yield rows
            if len(rows) < EXPORT_BATCH:
                return
            batch_reads = Reads.on(engine)
            try:
                rows = await _newest(batch_reads, scope, only, EXPORT_BATCH, rows[-1]["id"])
            finally:
                await batch_reads.close()

    return batches()

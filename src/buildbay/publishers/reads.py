"""Trusted publishers as read (db/reads.py): a plain record, and the queries that give them."""

from __future__ import annotations

from sqlalchemy import bindparam, select

from buildbay.db.reads import Reads, RecordOf
from buildbay.ids import split_page
from buildbay.publishers.models import TrustedPublisher
from buildbay.publishers.records import PublisherRecord

PUBLISHER = RecordOf(PublisherRecord, TrustedPublisher)

_PUBLISHERS_OF_APPLICATION = (
    select(*PUBLISHER.columns)
    .where(TrustedPublisher.application_id == bindparam("application_id"))
    .order_by(TrustedPublisher.id.desc())
    .limit(bindparam("limit"))
)


async def publishers_page(
    reads: Reads, application_id: str, limit: int, after_id: str | None
) -> tuple[list[PublisherRecord], str | None]:
    """A page of the application's trusted publishers, newest first."""
    query = _PUBLISHERS_OF_APPLICATION
    if after_id is not None:
        query = query.where(TrustedPublisher.id < after_id)
    rows = await reads.all(query, {"application_id": application_id, "limit": limit + 1})
    return split_page([PUBLISHER.of(row) for row in rows], limit, lambda p: p.id)

"""The audit log as a file to save: one JSON entry a line (NDJSON), streamed as its batches are
read (audit/reads.py `every_entry`). The API's `?format=ndjson` and the console's Export."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from buildbay.audit.schemas import entry_schema

NDJSON = "application/x-ndjson"


def download_headers(stem: str) -> dict[str, str]:
    """An attachment named `audit-log-{stem}.ndjson`, never cached."""
    return {
        "Content-Disposition": f'attachment; filename="audit-log-{stem}.ndjson"',
        "Cache-Control": "no-store",
    }


async def ndjson_lines(batches: AsyncIterator[list[dict[str, Any]]]) -> AsyncIterator[bytes]:
    async for rows in batches:
        yield b"".join(
            entry_schema(row).model_dump_json(by_alias=True).encode() + b"\n" for row in rows
        )

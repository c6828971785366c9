"""A project's devices as a file: the one Apple's "Register Multiple Devices" upload takes, or
a CSV for a spreadsheet. Written a batch of devices at a time, so that memory stays flat however
many devices the project has (docs/api.md, GET /api/projects/{id}/devices/export).

Apple's file is its sample's format (`Multiple-Upload-Samples.zip`, linked from the developer
account's device upload): UTF-8, tab-separated, one line per device ending in LF, after the
header line `Device ID<TAB>Device Name<TAB>Device Platform`; the platform is `ios` (iPhone,
iPad, iPod touch) or `mac`, and a name is 50 characters at most. The CSV is RFC 4180's (CRLF,
fields quoted where they must be), and a cell a spreadsheet would take for a formula is made
text.
"""

from __future__ import annotations

import csv
import io
import re
import unicodedata
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from datetime import datetime
from enum import StrEnum

from sqlalchemy.ext.asyncio import AsyncEngine

from buildbay.clock import utc_whole_seconds
from buildbay.db.reads import Reads
from buildbay.devices.enums import DevicePlatform
from buildbay.devices.reads import devices_after
from buildbay.devices.records import DeviceRecord, DeviceTester

APPLE_NAME_MAX = 50  # characters, as Apple's device upload takes them
BATCH = 1000  # devices read per statement

Exported = tuple[DeviceRecord, DeviceTester]
# The devices after a device id (None: from the first), at most `limit` of them, in id order.
FetchAfter = Callable[[str | None, int], Awaitable[list[Exported]]]


class DeviceFileFormat(StrEnum):
    APPLE = "apple"
    CSV = "csv"

    @property
    def media_type(self) -> str:
        if self is DeviceFileFormat.APPLE:
            return "text/tab-separated-values; charset=utf-8"
        return "text/csv; charset=utf-8; header=present"

    @property
    def extension(self) -> str:
        return "txt" if self is DeviceFileFormat.APPLE else "csv"


APPLE_HEADER = "Device ID\tDevice Name\tDevice Platform\n"
# Apple's sample names the platforms in lower case: `ios` covers iPadOS.
_APPLE_PLATFORM = {
    DevicePlatform.IOS: "ios",
    DevicePlatform.IPADOS: "ios",
    DevicePlatform.MACOS: "mac",
}
CSV_COLUMNS = (
    "id", "udid", "name", "model", "osVersion", "platform", "serial",
    "testerId", "testerEmail", "testerName", "enrolledAt", "lastSeenAt",
)  # fmt: skip
# What a spreadsheet takes for the start of a formula (OWASP, "CSV Injection").
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


# Tabs, line breaks and every other control character (Unicode's Cc), and Unicode's line and
# paragraph separators: none may split Apple's columns or lines. A run of them is one space.
_LINE_BREAKING = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]+")
# The start of a name that a spreadsheet would read as a formula: those characters, and the
# spaces between them.
_FORMULA_START = re.compile(r"^[=+\-@\s]+")


def apple_name(device: DeviceRecord) -> str:
    """The device's name as Apple's file takes it: on one line, within 50 characters, not
    starting as a formula does (the file is tab-separated text, which spreadsheets open too:
    the characters that would start one go, as Apple keeps no quote), never empty (the model,
    `iPhone14,2`, stands in for a name that is only spaces or those characters)."""
    text = _FORMULA_START.sub("", _LINE_BREAKING.sub(" ", device.name))[:APPLE_NAME_MAX].rstrip()
    return text or _FORMULA_START.sub("", device.model)[:APPLE_NAME_MAX] or device.udid


def apple_line(device: DeviceRecord) -> str:
    return f"{device.udid}\t{apple_name(device)}\t{_APPLE_PLATFORM[device.platform]}\n"


def neutralised(cell: str) -> str:
    """`cell` as a spreadsheet shows it as text, never runs it: one that starts as a formula
    does gets a leading apostrophe."""
    return "'" + cell if cell.startswith(_FORMULA_STARTS) else cell


def _timestamp(value: datetime) -> str:
    return utc_whole_seconds(value).strftime("%Y-%m-%dT%H:%M:%SZ")


def csv_cells(device: DeviceRecord, tester: DeviceTester) -> list[str]:
    cells = [
        device.id, device.udid, device.name, device.model, device.os_version,
        device.platform.value, device.serial or "", tester.id, tester.email, tester.name,
        _timestamp(device.enrolled_at), _timestamp(device.last_seen_at),
    ]  # fmt: skip
    return [neutralised(cell) for cell in cells]


def csv_text(rows: Iterable[list[str]]) -> str:
    out = io.StringIO()
    csv.writer(out, lineterminator="\r\n").writerows(rows)
    return out.getvalue()


def render(batch: list[Exported], kind: DeviceFileFormat) -> str:
    if kind is DeviceFileFormat.APPLE:
        return "".join(apple_line(device) for device, _ in batch)
    return csv_text(csv_cells(device, tester) for device, tester in batch)


async def export_chunks(
    kind: DeviceFileFormat, first: list[Exported], fetch_after: FetchAfter, batch: int = BATCH
) -> AsyncIterator[bytes]:
    """The file, a batch of devices at a time: the header, `first` (the first batch, read
    before the answer started, so that a database that fails fails the request), then the
    batches `fetch_after` reads until one comes short."""
    header = APPLE_HEADER if kind is DeviceFileFormat.APPLE else csv_text([list(CSV_COLUMNS)])
    yield header.encode()
    current = first
    while current:
        yield render(current, kind).encode()
        if len(current) < batch:
            return
        current = await fetch_after(current[-1][0].id, batch)


def file_name(project_name: str, project_id: str, kind: DeviceFileFormat) -> str:
    """A download's name that any header and file system takes: the project's name in ASCII
    letters and digits (its id if none are left), `-devices`, and the format's extension."""
    ascii_name = unicodedata.normalize("NFKD", project_name).encode("ascii", "ignore").decode()
    slug = re.sub(r"[^A-Za-z0-9]+", "-", ascii_name).strip("-").lower()[:60].strip("-")
    return f"{slug or project_id}-devices.{kind.extension}"


async def device_file(
    reads: Reads, read_engine: AsyncEngine, project_id: str, kind: DeviceFileFormat
) -> AsyncIterator[bytes]:
    """A project's device file as its bytes arrive. The first batch is read now, on the
    request's `reads`: a database that fails, fails the request with its problem, before the
    answer begins. Later batches are read once the answer is under way, when the request's
    reads are closed: each on a connection of its own, given back before its bytes are sent (a
    slow client holds no connection)."""
    first = await devices_after(reads, project_id, None, BATCH)

    async def fetch_after(after_id: str | None, limit: int) -> list[Exported]:
        batch_reads = Reads.on(read_engine)
        try:
            return await devices_after(batch_reads, project_id, after_id, limit)
        finally:
            await batch_reads.close()

    return export_chunks(kind, first, fetch_after)


def download_headers(project_name: str, project_id: str, kind: DeviceFileFormat) -> dict[str, str]:
    """An attachment named for the project, never cached."""
    name = file_name(project_name, project_id, kind)
    return {"Content-Disposition": f'attachment; filename="{name}"', "Cache-Control": "no-store"}

"""Reading a feedback's body: `multipart/form-data` with the fields `text`, `category`,
`context` and `reporterEmail` and the file field `screenshots` (repeated once per file), read
as it arrives and refused at the first byte past a limit.

- The whole body is at most MAX_BODY: the API's middleware refuses a larger Content-Length
  before reading a byte, and stops a body without one at the limit (413); this reader counts it
  again.
- A screenshot is written to a temporary file in the spool directory as it arrives (images.py
  `spool_file`: named, for the worker that re-encodes it to read, and removed when it is
  closed, or by the sweeper after a crash), and refused as soon as it passes
  MAX_SCREENSHOT_BYTES; a sixth is refused at its headers, before any of its bytes are read.
  Nothing of the body is ever held whole: what arrived is written WRITE_BYTES at a time, in a
  worker thread. (A write per chunk of the network's, 64 KiB, was a thread's round trip each:
  90 a feedback of three 2 MiB screenshots, which cost the event loop 15-18 ms of CPU a
  feedback where the parsing cost 6.)
- Bodies are read at intake.py's pace, the oldest feedback first.
- A field is held in memory, at most its own small limit; a field the form does not have, or
  one sent twice, is refused at its headers.

What is wrong with the fields is a 422 naming each field in words; a body that is not
multipart is a 400. Whether a screenshot is an image is decided by decoding it (images.py),
not by its name or its part's Content-Type, which are never read.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import re
from collections.abc import AsyncIterator, Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, cast

from pydantic import TypeAdapter, ValidationError
from python_multipart.exceptions import FormParserError
from python_multipart.multipart import MultipartParser, parse_options_header

from buildbay.errors import BadRequest, FieldError, PayloadTooLarge, ValidationFailed
from buildbay.feedback.enums import FeedbackCategory
from buildbay.feedback.images import spool_file
from buildbay.feedback.intake import intake
from buildbay.schemas import NUL, WHITESPACE, Email

REPLACEMENT = "\ufffd"
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")

if TYPE_CHECKING:
    from python_multipart.multipart import MultipartCallbacks

MiB = 1024 * 1024
MAX_BODY = 60 * MiB
MAX_SCREENSHOTS = 5
MAX_SCREENSHOT_BYTES = 10 * MiB
MAX_TEXT = 20_000  # characters, after trimming
MAX_CONTEXT_BYTES = 16 * 1024
# How deep a context's objects and arrays may nest: what a device says of itself is a few levels
# (one for the keys, a list of them, an object in it), and every reader (the API's answer, a
# webhook event) writes the JSON out again, where hundreds of levels cost a stack each time.
MAX_CONTEXT_DEPTH = 32
WRITE_BYTES = 1 * MiB  # of the screenshots' bytes gathered before they are written, at most
MAX_PART_HEADERS = 8 * 1024  # bytes of one part's headers
EXTRA_FIELD_BYTES = 1024  # of a page's own field (its CSRF token)

SCREENSHOTS = "screenshots"
TEXT, CATEGORY, CONTEXT, REPORTER_EMAIL = "text", "category", "context", "reporterEmail"
# The form's fields, each with the most bytes its part may hold (UTF-8 takes up to 4 a character).
FIELD_BYTES = {
    TEXT: 4 * MAX_TEXT + 4096,  # room for whitespace around it, trimmed
    CATEGORY: 64,
    CONTEXT: MAX_CONTEXT_BYTES,
    REPORTER_EMAIL: 1024,
}
# A field name a refusal may repeat as the name of the field it is about.
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,40}")
_EMAIL: TypeAdapter[str] = TypeAdapter(Email)
_CATEGORIES = ", ".join(c.value for c in FeedbackCategory)


@dataclass
class Upload:
    """A screenshot as it arrived: its bytes in a temporary file (images.py `spool_file`),
    not yet known to be an image."""

    position: int  # from 1, in the order sent
    file: IO[bytes]
    size: int = 0

    @property
    def path(self) -> str:
        return self.file.name


@dataclass
class Submission:
    """A feedback's fields as checked, and its screenshots as they arrived (`close` them)."""

    text: str
    category: FeedbackCategory
    context: dict[str, Any] | None
    reporter_email: str | None
    screenshots: list[Upload] = field(default_factory=list)
    # A page's own fields (`extra` of read_submission), as sent: the console's CSRF token.
    extra: dict[str, str] = field(default_factory=dict)

    def close(self) -> None:
        _close(self.screenshots)


def _close(uploads: list[Upload]) -> None:
    for upload in uploads:
        with contextlib.suppress(OSError):
            upload.file.close()


def _refused(name: str, message: str) -> ValidationFailed:
    return ValidationFailed.for_field(name, message)


async def read_submission(
    content_type: str,
    body: AsyncIterator[bytes],
    spool_dir: Path,
    *,
    extra: Collection[str] = (),
    seen: dict[str, bytearray] | None = None,
) -> Submission:
    """The feedback a `multipart/form-data` body (`content_type` its header, with the boundary)
    carries, read from `body` as it arrives; its screenshots spooled under `spool_dir`.

    A page's form (console/feedback.py) names the fields of its own it also sends (`extra`,
    each at most EXTRA_FIELD_BYTES, unchecked), and passes `seen`, which holds the fields as
    they arrived even when the body is refused part way (a sixth screenshot): what the person
    typed is shown again beside the refusal."""
    boundary = _boundary(content_type)
    reader = _Reader(spool_dir, extra, seen)
    parser = MultipartParser(boundary, cast("MultipartCallbacks", reader.callbacks()))
    received, pace = 0, intake().body()
    try:
        async for chunk in body:
            await pace.take(len(chunk))
            received += len(chunk)
            if received > MAX_BODY:
                raise PayloadTooLarge(
                    f"A feedback's body is at most {MAX_BODY // MiB} MiB", code="body_too_large"
                )
            parser.write(chunk)
            await reader.write_files()
        parser.finalize()
        await reader.write_files(everything=True)
        if not reader.ended:
            raise BadRequest(
                "The body ended before the form's closing boundary", code="malformed_multipart"
            )
        return reader.submission()
    except FormParserError:
        reader.close()
        raise BadRequest(
            "The body is not multipart/form-data as its Content-Type says",
            code="malformed_multipart",
        ) from None
    except BaseException:
        reader.close()
        raise


def _boundary(content_type: str) -> bytes:
    media, options = parse_options_header(content_type)
    boundary = options.get(b"boundary")
    if media != b"multipart/form-data" or not boundary:
        raise BadRequest(
            "Send feedback as multipart/form-data (with its boundary)",
            code="unsupported_content_type",
        )
    return boundary


class _Reader:
    """python-multipart's callbacks: each part's headers name where its bytes go."""

    def __init__(
        self,
        spool_dir: Path,
        extra: Collection[str] = (),
        seen: dict[str, bytearray] | None = None,
    ) -> None:
        self.spool_dir = spool_dir
        self.limits = FIELD_BYTES | dict.fromkeys(extra, EXTRA_FIELD_BYTES)
        self.extra = tuple(extra)
        self.fields: dict[str, bytearray] = {} if seen is None else seen
        self.uploads: list[Upload] = []
        self.ended = False
        self._header_name = bytearray()
        self._header_value = bytearray()
        self._header_bytes = 0
        self._disposition = b""
        self._field: str | None = None  # the part being read: a field's name ...
        self._upload: Upload | None = None  # ... or a screenshot
        self._unwritten: list[tuple[Upload, bytes]] = []
        self._unwritten_bytes = 0

    def callbacks(self) -> dict[str, Callable[..., None]]:
        return {
            "on_part_begin": self._part_begin,
            "on_header_field": self._header_field,
            "on_header_value": self._header_value_data,
            "on_header_end": self._header_end,
            "on_headers_finished": self._headers_finished,
            "on_part_data": self._part_data,
            "on_end": self._end,
        }

    def _part_begin(self) -> None:
        self._disposition, self._header_bytes = b"", 0
        self._field = self._upload = None

    def _count_header(self, size: int) -> None:
        self._header_bytes += size
        if self._header_bytes > MAX_PART_HEADERS:
            raise BadRequest(
                f"A part's headers are at most {MAX_PART_HEADERS} bytes",
                code="malformed_multipart",
            )

    def _header_field(self, data: bytes, start: int, end: int) -> None:
        self._count_header(end - start)
        self._header_name += data[start:end]

    def _header_value_data(self, data: bytes, start: int, end: int) -> None:
        self._count_header(end - start)
        self._header_value += data[start:end]

    def _header_end(self) -> None:
        if self._header_name.lower() == b"content-disposition":
            self._disposition = bytes(self._header_value)
        self._header_name.clear()
        self._header_value.clear()

    def _headers_finished(self) -> None:
        _, options = parse_options_header(self._disposition)
        raw = options.get(b"name")
        if raw is None:
            raise BadRequest(
                "Each part of the form needs a Content-Disposition with a name",
                code="malformed_multipart",
            )
        name = raw.decode("utf-8", "replace")
        if name == SCREENSHOTS:
            if len(self.uploads) >= MAX_SCREENSHOTS:
                raise _refused(SCREENSHOTS, f"at most {MAX_SCREENSHOTS} screenshots a feedback")
            self._upload = Upload(len(self.uploads) + 1, spool_file(self.spool_dir))
            self.uploads.append(self._upload)
        elif name in self.limits:
            if name in self.fields:
                raise _refused(name, "is sent twice; send it once")
            self._field, self.fields[name] = name, bytearray()
        else:
            shown = name if _PLAIN_NAME.fullmatch(name) else "form"
            raise _refused(
                shown,
                "is not a field of feedback (text, category, context, reporterEmail and "
                "screenshots are)",
            )

    def _part_data(self, data: bytes, start: int, end: int) -> None:
        if (upload := self._upload) is not None:
            upload.size += end - start
            if upload.size > MAX_SCREENSHOT_BYTES:
                raise _refused(
                    SCREENSHOTS,
                    f"screenshot {upload.position} is larger than "
                    f"{MAX_SCREENSHOT_BYTES // MiB} MiB",
                )
            self._unwritten.append((upload, data[start:end]))
            self._unwritten_bytes += end - start
            return
        if self._field is None:
            return  # a part refused at its headers never gets here
        held = self.fields[self._field]
        if len(held) + end - start > self.limits[self._field]:
            raise _refused(self._field, _too_long(self._field))
        held += data[start:end]

    def _end(self) -> None:
        self.ended = True

    async def write_files(self, *, everything: bool = False) -> None:
        """Write the screenshots' bytes that arrived to their files, in a worker thread, once
        there are WRITE_BYTES of them (or any, with `everything`: the body has ended)."""
        if not self._unwritten or (not everything and self._unwritten_bytes < WRITE_BYTES):
            return
        unwritten, self._unwritten, self._unwritten_bytes = self._unwritten, [], 0

        def write() -> None:
            for upload, data in unwritten:
                upload.file.write(data)
                upload.file.flush()  # for the worker that reads it by its name

        await asyncio.to_thread(write)

    def close(self) -> None:
        _close(self.uploads)

    def submission(self) -> Submission:
        """The fields, checked all at once (a 422 names each that is wrong)."""
        errors: list[FieldError] = []
        checked: dict[str, Any] = {}
        for name, check in (
            (TEXT, _text),
            (CATEGORY, _category),
            (CONTEXT, _context),
            (REPORTER_EMAIL, _reporter_email),
        ):
            try:
                checked[name] = check(self.fields.get(name))
            except ValueError as exc:
                errors.append(FieldError(name, str(exc)))
        if errors:
            self.close()
            detail = "; ".join(f"{e.field}: {e.message}" for e in errors)
            raise ValidationFailed(detail, errors=errors)
        # An empty file part is no screenshot: what a browser sends for a file input left empty.
        _close([u for u in self.uploads if u.size == 0])
        sent = [u for u in self.uploads if u.size > 0]
        for position, upload in enumerate(sent, start=1):
            upload.position = position
        extra = {name: self.fields[name].decode("utf-8", "replace") for name in self.extra
                 if name in self.fields}  # fmt: skip
        return Submission(
            checked[TEXT], checked[CATEGORY], checked[CONTEXT], checked[REPORTER_EMAIL], sent,
            extra,
        )  # fmt: skip


def _too_long(name: str) -> str:
    if name == TEXT:
        return f"is longer than {MAX_TEXT:,} characters"
    if name == CONTEXT:
        return f"is larger than {MAX_CONTEXT_BYTES // 1024} KiB of JSON"
    return "is too long"


def _decoded(raw: bytearray) -> str:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError("is not UTF-8 text") from None
    if NUL in text:
        raise ValueError("cannot contain the NUL character (U+0000)")
    return text


def _text(raw: bytearray | None) -> str:
    if raw is None:
        raise ValueError("is required: say what happened")
    text = _decoded(raw).strip(WHITESPACE)
    if not text:
        raise ValueError("cannot be empty: say what happened")
    if len(text) > MAX_TEXT:
        raise ValueError(_too_long(TEXT))
    return text


def _category(raw: bytearray | None) -> FeedbackCategory:
    if raw is None:
        raise ValueError(f"is required: one of {_CATEGORIES}")
    try:
        return FeedbackCategory(_decoded(raw))
    except ValueError:
        raise ValueError(f"must be one of {_CATEGORIES}") from None


def _context(raw: bytearray | None) -> dict[str, Any] | None:
    if raw is None:
        return None
    text = _decoded(raw)
    if not text.strip(WHITESPACE):
        return None  # an empty form field: no context
    try:
        context = json.loads(text, parse_constant=_not_a_number, parse_float=_finite)
    except RecursionError:
        raise ValueError(_TOO_DEEP) from None
    except _NotJsonNumber as exc:
        raise ValueError(str(exc)) from None
    except ValueError:  # not JSON, or a number Python will not convert
        raise ValueError("is not JSON") from None
    if not isinstance(context, dict):
        raise ValueError('must be a JSON object, like {"model": "Pixel 8", "os": "14"}')
    if _depth(context) > MAX_CONTEXT_DEPTH:
        raise ValueError(_TOO_DEEP)
    return _representable(context)  # type: ignore[no-any-return]


_TOO_DEEP = f"nests too deeply (at most {MAX_CONTEXT_DEPTH} levels of objects and arrays)"


class _NotJsonNumber(ValueError):
    """A number JSON cannot say (Python's decoder takes NaN, Infinity and 1e400 as floats, and
    neither PostgreSQL nor a JSON reader takes them back)."""


def _not_a_number(name: str) -> Any:
    raise _NotJsonNumber(f"holds {name}, which is not a JSON number")


def _finite(digits: str) -> float:
    number = float(digits)
    if not math.isfinite(number):
        raise _NotJsonNumber(f"holds a number too large to keep ({digits[:20]})")
    return number


def _depth(value: Any) -> int:
    """How deep objects and arrays nest in `value` (1 for a flat object), counted without
    recursion: stopped as soon as it is past MAX_CONTEXT_DEPTH."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_CONTEXT_DEPTH:
            return depth
        deepest = max(deepest, depth)
        children = item.values() if isinstance(item, dict) else item
        stack.extend((c, depth + 1) for c in children if isinstance(c, dict | list))
    return deepest


def _representable(value: Any) -> Any:
    """The JSON with each NUL, and each half of a UTF-16 surrogate pair written alone as an
    escape (`\\ud800`), in its keys and strings replaced by U+FFFD, as a browser shows them:
    neither is text that UTF-8 or PostgreSQL can keep, and a device's context is what the app
    sent, not a reason to lose the report."""
    if isinstance(value, dict):
        return {_representable(k): _representable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_representable(item) for item in value]
    if isinstance(value, str):
        text = value.replace(NUL, REPLACEMENT)
        return _LONE_SURROGATE.sub(REPLACEMENT, text)
    return value


def _reporter_email(raw: bytearray | None) -> str | None:
    if raw is None:
        return None
    text = _decoded(raw)
    if not text:
        return None
    try:
        return _EMAIL.validate_python(text)
    except ValidationError as exc:
        message = str(exc.errors()[0]["msg"]).removeprefix("Value error, ")
        raise ValueError(f"is not an e-mail address mail can reach ({message})") from None

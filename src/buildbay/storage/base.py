"""The storage contract every backend (local disk, S3-compatible) fulfils, and its error tree."""

from __future__ import annotations

import base64
import concurrent.futures
import contextlib
import hashlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import IO, BinaryIO, Protocol

from buildbay.errors import (
    BadRequest,
    BuildbayError,
    Conflict,
    InsufficientStorage,
    NotFound,
    PayloadTooLarge,
    ServiceUnavailable,
    ValidationFailed,
)


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    size: int
    sha256: str | None  # None when the backend does not know it without reading the bytes
    # Base64 of the SHA-512 (as electron-updater reads it), where the backend knows it too.
    sha512: str | None = None
    # The version of these bytes where the backend keeps several (an S3 bucket with versioning):
    # verify pins it, so a later PUT to a still-valid upload URL cannot change a ready build.
    version: str | None = None


@dataclass(frozen=True, slots=True)
class UploadTarget:
    url: str
    method: str = "PUT"
    headers: dict[str, str] = field(
        default_factory=lambda: {"Content-Type": "application/octet-stream"}
    )


@dataclass(frozen=True, slots=True)
class PartInfo:
    """One part of a multipart upload that has fully arrived."""

    number: int
    size: int
    received_at: datetime
    etag: str | None = None  # what S3's CompleteMultipartUpload needs; None locally


@dataclass(frozen=True, slots=True)
class MultipartUpload:
    """A multipart upload the storage holds, for the sweeper."""

    key: str
    upload_id: str


# S3's limits, which the local backend keeps too, so a client sees one protocol.
MIN_PART_SIZE = 5 * 1024 * 1024  # every part but the last
MAX_PARTS = 10_000


def part_bounds(number: int, part_size: int, size: int) -> tuple[int, int]:
    """Offset and length of part `number` (from 1) of a `size`-byte file cut into `part_size`."""
    offset = (number - 1) * part_size
    return offset, max(0, min(part_size, size - offset))


def parts_count(size: int, part_size: int) -> int:
    return -(-size // part_size)


def missing_parts(parts: list[PartInfo], size: int, part_size: int) -> list[int]:
    """The part numbers that have not arrived whole (a part of the wrong size counts as absent)."""
    have = {p.number for p in parts if p.size == part_bounds(p.number, part_size, size)[1]}
    return [n for n in range(1, parts_count(size, part_size) + 1) if n not in have]


READ_BLOCK = 1024 * 1024
LIST_PAGE = 1000  # keys a page of `Storage.stored_keys` (S3's ListObjectsV2 page)


@dataclass(frozen=True, slots=True)
class Digests:
    """A file's SHA-256 (hex, as the API shows it) and, where it was asked for, its SHA-512
    (base64, as electron-updater reads it), from one pass over its bytes."""

    sha256: str
    sha512: str | None = None


class Hashes:
    """The SHA-256 (and, `with_sha512`, the SHA-512) of the same bytes, as they are read or
    arrive. Each hash releases the interpreter's lock on large blocks: the two run side by
    side, in threads of their own.

    The SHA-512 is asked for where a desktop updater's feed needs it (a build of a desktop
    application): it costs more processor time than the SHA-256 (no instructions of its own)."""

    def __init__(self, with_sha512: bool = True) -> None:
        self.sha256: Digest = hashlib.sha256()
        self.sha512: Digest | None = hashlib.sha512() if with_sha512 else None

    def copy(self) -> Hashes:
        copied = Hashes(with_sha512=False)
        copied.sha256 = self.sha256.copy()
        copied.sha512 = self.sha512.copy() if self.sha512 is not None else None
        return copied

    def update(self, data: bytes) -> None:
        """Each hash, side by side: the SHA-512 in another thread (blocking)."""
        if self.sha512 is None:
            self.sha256.update(data)
            return
        second = _SECOND_HASH.submit(self.sha512.update, data)
        self.sha256.update(data)
        second.result()

    def submit(
        self, pool: concurrent.futures.Executor, block: list[bytes]
    ) -> list[concurrent.futures.Future[object]]:
        """Hash the block's chunks into each hash, each in a thread of `pool`; the futures say
        when they are done. A hash's blocks must be submitted one after the other, each once
        the one before it is done."""
        futures: list[concurrent.futures.Future[object]] = [
            pool.submit(_hash_all, self.sha256, block)
        ]
        if self.sha512 is not None:
            futures.append(pool.submit(_hash_all, self.sha512, block))
        return futures

    def digests(self) -> Digests:
        sha512 = self.sha512
        return Digests(
            self.sha256.hexdigest(),
            base64.b64encode(sha512.digest()).decode() if sha512 is not None else None,
        )


class Digest(Protocol):
    """What a hashlib hash object offers that the stores use."""

    def update(self, data: bytes, /) -> None: ...

    def copy(self) -> Digest: ...

    def digest(self) -> bytes: ...

    def hexdigest(self) -> str: ...


def _hash_all(digest: Digest, block: list[bytes]) -> None:
    for chunk in block:
        digest.update(chunk)


# SHA-512's half of reading a file through both hashes (`digests_of`), beside the reader's.
_SECOND_HASH = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="sha512")


def digests_of(stream: IO[bytes], with_sha512: bool = True) -> Digests:
    """SHA-256 (and SHA-512) of what is left to read in `stream`, read once in blocks; the
    SHA-512 of a block is computed in another thread while this one does its SHA-256 and reads
    the next (blocking: a thread's)."""
    hashes = Hashes(with_sha512)
    sha512 = hashes.sha512
    pending: concurrent.futures.Future[object] | None = None
    while block := stream.read(READ_BLOCK):
        if sha512 is not None:
            if pending is not None:
                pending.result()
            pending = _SECOND_HASH.submit(_hash_all, sha512, [block])
        hashes.sha256.update(block)
    if pending is not None:
        pending.result()
    return hashes.digests()


class StorageError(BuildbayError):
    """Base of the storage errors; routes and services never see a backend's own exceptions."""


class ObjectNotFound(StorageError, NotFound):
    code = "object_not_found"


class StorageUnavailable(StorageError, ServiceUnavailable):
    code = "storage_unavailable"


class StorageFull(StorageError, InsufficientStorage):
    code = "storage_full"


class BodyTooLarge(StorageError, PayloadTooLarge):
    code = "upload_too_large"


class BodyTooShort(StorageError, BadRequest):
    code = "upload_too_short"


class UploadGone(StorageError, NotFound):
    """The multipart upload was completed or aborted: its parts can no longer change."""

    code = "upload_not_found"


class PartsMissing(StorageError, ValidationFailed):
    code = "upload_incomplete"

    def __init__(self, missing: list[int]) -> None:
        shown = ", ".join(map(str, missing[:20])) + (", ..." if len(missing) > 20 else "")
        super().__init__(
            f"{len(missing)} part(s) have not arrived yet ({shown}); send them, then verify again",
            extensions={"missingParts": missing},
        )


class UploadInProgress(StorageError, Conflict):
    code = "upload_in_progress"


class Storage(Protocol):
    """Where build files live. Keys are `project/application/build`, made by the service."""

    async def upload_target(
        self, key: str, size: int, expires_at: datetime, sha256: str | None
    ) -> UploadTarget:
        """A URL the client PUTs exactly `size` bytes to, valid until `expires_at`."""
        ...

    async def download_url(
        self, key: str, file_name: str, expires_at: datetime, version: str | None = None
    ) -> str:
        """A URL that serves the object (that `version` of it, if given) as an attachment named
        `file_name` until `expires_at`."""
        ...

    async def stat(self, key: str) -> ObjectInfo | None:
        """Size (and sha256, sha512 where known) of a stored object; None if there is none."""
        ...

    async def put(self, key: str, source: IO[bytes], size: int, content_type: str) -> None:
        """Store the `size` bytes `source` holds (a file, read from its start; its reads block)
        under `key`, written by the server itself rather than through an upload URL: a
        screenshot the server re-encoded. All or nothing: a reader sees no object or the whole
        one."""
        ...

    async def view_url(
        self, key: str, file_name: str, content_type: str, expires_at: datetime
    ) -> str | None:
        """A URL that serves the object inline (a browser shows it) as `content_type`, named
        `file_name`, until `expires_at`; None where the backend has no such address of its own
        (the local disk: the API process serves the bytes itself, from `open_reader`)."""
        ...

    async def compute_digests(
        self, key: str, version: str | None = None, with_sha512: bool = True
    ) -> Digests:
        """Read the object (that `version` of it) once through SHA-256 (and SHA-512), off the
        event loop. ObjectNotFound if absent."""
        ...

    def open_reader(self, key: str, size: int, version: str | None = None) -> BinaryIO:
        """The object (of `size` bytes; that `version` of it) as a seekable binary file whose
        reads block: for a worker thread. ObjectNotFound if absent."""
        ...

    async def delete(self, key: str) -> None:
        """Remove one object; removing an absent object is not an error."""
        ...

    async def delete_prefix(self, prefix: str) -> None:
        """Remove every object whose key starts with `prefix` (a project's or application's)."""
        ...

    def stored_keys(self, modified_before: datetime) -> AsyncIterator[list[str]]:
        """The keys of the stored objects last written before `modified_before`, a page (of at
        most LIST_PAGE) at a time, in no particular order: for the sweeper, which removes those
        no build owns."""
        ...

    def guard(self, key: str) -> contextlib.AbstractAsyncContextManager[None]:
        """Exclusive hold on one object, so that bytes cannot change between verify's check and
        the build becoming ready, nor land after the build was deleted."""
        ...

    async def check(self) -> None:
        """Raise StorageUnavailable if the backend cannot be used right now."""
        ...

    async def remove_abandoned_uploads(self, older_than: datetime) -> int:
        """Remove the partial files of uploads that a crash cut off before `older_than`
        (a backend whose uploads are all-or-nothing has none). Returns how many."""
        ...

    # -- multipart uploads (large builds, in parts) ------------------------------------------------

    async def start_multipart(self, key: str, size: int, part_size: int) -> str:
        """Begin an upload of `size` bytes in parts of `part_size`; returns its upload id."""
        ...

    async def part_target(
        self, key: str, upload_id: str, number: int, size: int, expires_at: datetime
    ) -> UploadTarget:
        """A URL the client PUTs part `number`, exactly `size` bytes, to until `expires_at`."""
        ...

    async def list_parts(self, key: str, upload_id: str) -> list[PartInfo]:
        """The parts that have fully arrived, by number. UploadGone if the upload is over."""
        ...

    async def complete_multipart(self, key: str, upload_id: str, size: int, part_size: int) -> None:
        """Join the parts into the object at `key` (no second copy of the bytes). PartsMissing
        if some have not arrived; UploadInProgress if a part is being written."""
        ...

    async def abort_multipart(self, key: str, upload_id: str) -> None:
        """Drop the upload and its parts; an upload already gone is not an error."""
        ...

    def multipart_uploads(self, started_before: datetime) -> AsyncIterator[list[MultipartUpload]]:
        """The multipart uploads begun before `started_before`, a page at a time (the sweeper
        aborts those no pending build owns)."""
        ...

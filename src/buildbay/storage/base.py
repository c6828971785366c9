"""The storage contract every backend (local disk, S3-compatible) fulfils, and its error tree."""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import IO, BinaryIO, Protocol

from buildbay.errors import (
    BadRequest,
    BuildbayError,
    InsufficientStorage,
    NotFound,
    PayloadTooLarge,
    ServiceUnavailable,
)


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    size: int
    sha256: str | None  # None when the backend does not know it without reading the bytes
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


READ_BLOCK = 1024 * 1024
LIST_PAGE = 1000  # keys a page of `Storage.stored_keys` (S3's ListObjectsV2 page)


def sha256_of(stream: IO[bytes]) -> str:
    """Hex SHA-256 of what is left to read in `stream`, read in blocks (blocking: a thread's)."""
    digest = hashlib.sha256()
    while block := stream.read(READ_BLOCK):
        digest.update(block)
    return digest.hexdigest()


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
        """Size (and sha256 where known) of a stored object; None if there is none."""
        ...

    async def compute_sha256(self, key: str, version: str | None = None) -> str:
        """Read the object (that `version` of it) through SHA-256, off the event loop.
        ObjectNotFound if absent."""
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

"""Build files in an S3-compatible bucket (AWS S3, MinIO, Cloudflare R2, Ceph).

The bytes never pass through the API: clients PUT to a presigned URL and download from another.
Presigning is a local computation (no network round trip in upload-link); HEAD, GET and DELETE
go to the bucket through botocore in a pool of threads of their own, so a slow bucket holds
threads, never the event loop. Every botocore error becomes one of the storage errors.

Unlike the local backend this one cannot refuse a PUT: a presigned URL works until it expires.
In a bucket with versioning, verify pins the version it checked, and downloads serve that
version whatever is PUT later; without versioning, the holder of an upload link could replace
a verified build's bytes until the link expires (see docs/operations.md).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import concurrent.futures
import contextlib
import functools
import io
import logging
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from typing import IO, Any, BinaryIO, TypeVar
from urllib.parse import quote

import botocore.session
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from buildbay.storage.base import (
    LIST_PAGE,
    Digests,
    MultipartUpload,
    ObjectInfo,
    ObjectNotFound,
    PartInfo,
    PartsMissing,
    StorageUnavailable,
    UploadGone,
    UploadTarget,
    digests_of,
    missing_parts,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

_MAX_PRESIGN_SECONDS = 7 * 24 * 3600  # SigV4's limit
_NOT_FOUND = {"404", "NoSuchKey", "NotFound", "NoSuchBucket"}
# Enough threads for many concurrent HEADs and hashes; each waits on the network, not the CPU.
_WORKERS = concurrent.futures.ThreadPoolExecutor(max_workers=32, thread_name_prefix="s3")


class S3Storage:
    def __init__(
        self,
        bucket: str,
        *,
        prefix: str = "",
        endpoint_url: str | None = None,
        region: str | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self._now = clock
        session = botocore.session.get_session()  # credentials the standard AWS way
        # Any: botocore builds the S3 methods at run time, so its stubs cannot name them.
        self._client: Any = session.create_client(
            "s3",
            endpoint_url=endpoint_url or None,
            region_name=region or None,
            config=Config(
                signature_version="s3v4",
                # Path style works with every S3-compatible server; AWS accepts it too.
                s3={"addressing_style": "path"},
                # Checksums only where asked: a default CRC32 would land in presigned URLs, and
                # clients would have to send a header they cannot know.
                request_checksum_calculation="when_required",
                response_checksum_validation="when_required",
                retries={"max_attempts": 3, "mode": "standard"},
                connect_timeout=5,
                read_timeout=30,
                max_pool_connections=32,
            ),
        )

    def object_key(self, key: str) -> str:
        return self.prefix + key

    # -- URLs (computed locally) -------------------------------------------------------------------

    async def upload_target(
        self, key: str, size: int, expires_at: datetime, sha256: str | None
    ) -> UploadTarget:
        params: dict[str, Any] = {
            "Bucket": self.bucket,
            "Key": self.object_key(key),
            "ContentLength": size,
            "ContentType": "application/octet-stream",
        }
        headers = {"Content-Type": "application/octet-stream"}
        if sha256 is not None:
            # Signed, so the client must send it, and S3 refuses bytes that do not match it.
            checksum = base64.b64encode(bytes.fromhex(sha256)).decode()
            params["ChecksumSHA256"] = checksum
            headers["x-amz-checksum-sha256"] = checksum
        url = self._presign("put_object", params, expires_at)
        return UploadTarget(url=url, headers=headers)

    async def download_url(
        self, key: str, file_name: str, expires_at: datetime, version: str | None = None
    ) -> str:
        # As the local backend's FileResponse writes it: plain when the name allows, else RFC 5987.
        quoted = quote(file_name)
        if quoted == file_name:
            disposition = f'attachment; filename="{file_name}"'
        else:
            disposition = f"attachment; filename*=utf-8''{quoted}"
        params = {
            "Bucket": self.bucket,
            "Key": self.object_key(key),
            "ResponseContentDisposition": disposition,
            **_version(version),
        }
        return self._presign("get_object", params, expires_at)

    async def view_url(
        self, key: str, file_name: str, content_type: str, expires_at: datetime
    ) -> str | None:
        params = {
            "Bucket": self.bucket,
            "Key": self.object_key(key),
            "ResponseContentType": content_type,
            "ResponseContentDisposition": f'inline; filename="{quote(file_name)}"',
        }
        return self._presign("get_object", params, expires_at)

    def _presign(self, operation: str, params: dict[str, Any], expires_at: datetime) -> str:
        seconds = int((expires_at - self._now()).total_seconds())
        seconds = max(1, min(seconds, _MAX_PRESIGN_SECONDS))
        try:
            url: str = self._client.generate_presigned_url(
                operation, Params=params, ExpiresIn=seconds
            )
        except BotoCoreError as exc:  # e.g. no credentials configured
            raise StorageUnavailable(f"Cannot sign a storage URL: {exc}") from exc
        return url

    # -- the bucket --------------------------------------------------------------------------------

    async def stat(self, key: str) -> ObjectInfo | None:
        try:
            head = await self._call(
                self._client.head_object,
                Bucket=self.bucket,
                Key=self.object_key(key),
                ChecksumMode="ENABLED",
            )
        except ObjectNotFound:
            return None
        version = head.get("VersionId")
        return ObjectInfo(
            size=int(head["ContentLength"]),
            sha256=_hex_sha256(head),
            # "null": the bucket does not keep versions (never enabled, or suspended).
            version=version if version and version != "null" else None,
        )

    async def compute_digests(
        self, key: str, version: str | None = None, with_sha512: bool = True
    ) -> Digests:
        response = await self._call(
            self._client.get_object,
            Bucket=self.bucket,
            Key=self.object_key(key),
            **_version(version),
        )
        body = response["Body"]

        def _hash() -> Digests:
            with contextlib.closing(body):
                return digests_of(body, with_sha512)

        return await self._run(_hash)

    async def put(self, key: str, source: IO[bytes], size: int, content_type: str) -> None:
        def _put() -> None:
            source.seek(0)
            self._client.put_object(
                Bucket=self.bucket,
                Key=self.object_key(key),
                Body=source,
                ContentLength=size,
                ContentType=content_type,
            )

        # One PUT: S3 stores the whole object or nothing.
        await self._run(_put)

    def open_reader(self, key: str, size: int, version: str | None = None) -> BinaryIO:
        raw = _RangeReader(self._client, self.bucket, self.object_key(key), size, version)
        return io.BufferedReader(raw, buffer_size=256 * 1024)

    async def delete(self, key: str) -> None:
        # S3 answers 204 for an absent key as well.
        await self._call(self._client.delete_object, Bucket=self.bucket, Key=self.object_key(key))

    async def delete_prefix(self, prefix: str) -> None:
        await self._run(self._delete_prefix, self.object_key(prefix))

    def _delete_prefix(self, prefix: str) -> None:
        pages = self._client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=prefix
        )
        for page in pages:
            keys = [{"Key": item["Key"]} for item in page.get("Contents", [])]
            if keys:  # at most 1000 a page, as DeleteObjects takes
                self._client.delete_objects(
                    Bucket=self.bucket, Delete={"Objects": keys, "Quiet": True}
                )

    async def stored_keys(self, modified_before: datetime) -> AsyncIterator[list[str]]:
        pages = self._client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=self.prefix, PaginationConfig={"PageSize": LIST_PAGE}
        )
        iterator = iter(pages)
        while (page := await self._run(next, iterator, None)) is not None:
            keys = [
                item["Key"].removeprefix(self.prefix)
                for item in page.get("Contents", [])
                if item["LastModified"] < modified_before
            ]
            if keys:
                yield keys

    @contextlib.asynccontextmanager
    async def guard(self, key: str) -> AsyncIterator[None]:
        # Nothing to hold: the bucket takes PUTs from presigned URLs without asking this process
        # (see the module's docstring).
        yield

    async def check(self) -> None:
        try:
            await self._call(self._client.head_bucket, Bucket=self.bucket)
        except ObjectNotFound as exc:  # a HEAD's 404 carries no code: here it is the bucket
            raise StorageUnavailable(f"The bucket {self.bucket} does not exist") from exc

    async def remove_abandoned_uploads(self, older_than: datetime) -> int:
        # A presigned PUT stores the whole object or nothing: no partial upload to remove.
        return 0

    # -- multipart uploads: the bucket's own, through presigned UploadPart URLs -----------------

    async def start_multipart(self, key: str, size: int, part_size: int) -> str:
        started = await self._call(
            self._client.create_multipart_upload,
            Bucket=self.bucket,
            Key=self.object_key(key),
            ContentType="application/octet-stream",
        )
        upload_id: str = started["UploadId"]
        return upload_id

    async def part_target(
        self, key: str, upload_id: str, number: int, size: int, expires_at: datetime
    ) -> UploadTarget:
        params = {
            "Bucket": self.bucket,
            "Key": self.object_key(key),
            "UploadId": upload_id,
            "PartNumber": number,
            "ContentLength": size,  # signed: the bucket refuses a part of another size
        }
        return UploadTarget(url=self._presign("upload_part", params, expires_at), headers={})

    async def list_parts(self, key: str, upload_id: str) -> list[PartInfo]:
        def _list() -> list[PartInfo]:
            pages = self._client.get_paginator("list_parts").paginate(
                Bucket=self.bucket, Key=self.object_key(key), UploadId=upload_id
            )
            return [
                PartInfo(
                    number=int(part["PartNumber"]),
                    size=int(part["Size"]),
                    received_at=part["LastModified"],
                    etag=part["ETag"],
                )
                for page in pages
                for part in page.get("Parts", [])
            ]

        return sorted(await self._run(_list), key=lambda p: p.number)

    async def complete_multipart(self, key: str, upload_id: str, size: int, part_size: int) -> None:
        parts = await self.list_parts(key, upload_id)
        missing = missing_parts(parts, size, part_size)
        if missing:
            raise PartsMissing(missing)
        await self._call(
            self._client.complete_multipart_upload,
            Bucket=self.bucket,
            Key=self.object_key(key),
            UploadId=upload_id,
            MultipartUpload={"Parts": [{"PartNumber": p.number, "ETag": p.etag} for p in parts]},
        )

    async def abort_multipart(self, key: str, upload_id: str) -> None:
        with contextlib.suppress(UploadGone, ObjectNotFound):
            await self._call(
                self._client.abort_multipart_upload,
                Bucket=self.bucket,
                Key=self.object_key(key),
                UploadId=upload_id,
            )

    async def multipart_uploads(
        self, started_before: datetime
    ) -> AsyncIterator[list[MultipartUpload]]:
        pages = self._client.get_paginator("list_multipart_uploads").paginate(
            Bucket=self.bucket, Prefix=self.prefix
        )
        iterator = iter(pages)
        while (page := await self._run(next, iterator, None)) is not None:
            uploads = [
                MultipartUpload(item["Key"].removeprefix(self.prefix), item["UploadId"])
                for item in page.get("Uploads", [])
                if item["Initiated"] < started_before
            ]
            if uploads:
                yield uploads

    # -- calls off the event loop, errors translated ----------------------------------------------

    async def _call(self, method: Callable[..., T], **kwargs: Any) -> T:
        return await self._run(functools.partial(method, **kwargs))

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(_WORKERS, fn, *args)
        except ClientError as exc:
            error = exc.response.get("Error", {})
            code = str(error.get("Code", ""))
            status = str(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))
            if code == "NoSuchUpload":
                raise UploadGone("This upload was completed or given up") from exc
            if code in _NOT_FOUND or status == "404":
                if code == "NoSuchBucket":
                    raise StorageUnavailable(f"The bucket {self.bucket} does not exist") from exc
                raise ObjectNotFound("No stored object under this key") from exc
            log.warning("S3 refused %s: %s %s", getattr(fn, "func", fn), code, error.get("Message"))
            raise StorageUnavailable(f"The object store refused the request ({code})") from exc
        except BotoCoreError as exc:  # connection refused, timeouts, no credentials, ...
            log.warning("S3 unreachable: %s", exc)
            raise StorageUnavailable("The object store cannot be reached") from exc


class _RangeReader(io.RawIOBase):
    """A seekable, read-only view of one object, read with ranged GETs: zipfile can find an
    archive's directory and a few entries without the whole object being fetched."""

    def __init__(self, client: Any, bucket: str, key: str, size: int, version: str | None) -> None:
        self._client, self._bucket, self._key = client, bucket, key
        self._size, self._version, self._position = size, version, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self._size}[whence]
        self._position = max(0, base + offset)
        return self._position

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        end = min(self._position + len(view), self._size)
        if end <= self._position:
            return 0
        try:
            response = self._client.get_object(
                Bucket=self._bucket,
                Key=self._key,
                Range=f"bytes={self._position}-{end - 1}",
                **_version(self._version),
            )
            data = response["Body"].read()
        except (ClientError, BotoCoreError) as exc:
            raise OSError(f"the object store refused a read: {exc}") from exc
        view[: len(data)] = data
        self._position += len(data)
        return len(data)


def _version(version: str | None) -> dict[str, str]:
    return {"VersionId": version} if version else {}


def _hex_sha256(head: dict[str, Any]) -> str | None:
    """The object's SHA-256 as hex, when S3 kept a full-object one (not a multipart composite)."""
    checksum = head.get("ChecksumSHA256")
    if not checksum or "-" in checksum or head.get("ChecksumType", "FULL_OBJECT") != "FULL_OBJECT":
        return None
    try:
        return base64.b64decode(checksum, validate=True).hex()
    except (binascii.Error, ValueError):
        return None

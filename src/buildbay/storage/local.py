"""Build files on the local disk, served and received by the API process through signed URLs.

Uploads stream into a temporary file in the same directory tree while being hashed, are flushed
to disk, then renamed into place atomically: a reader sees the old object or the whole new one,
never a partial file. The SHA-256 and SHA-512 (of a screenshot, the SHA-256 alone) are kept
beside the object (`<object>.sha256`), tied to the object's inode and size, so verify does not
read the bytes again.

An upload holds an flock on its temporary file while it streams. A process killed in the middle
leaves the file behind, unlocked: the sweeper removes such files once they are old.

A large build may come in parts instead (a multipart upload): this store signs the parts' URLs,
and local_multipart.py receives the parts and joins them into an object here. disk.py holds the
way both put a body on the disk.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import fcntl
import os
import shutil
import tempfile
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime
from pathlib import Path
from stat import S_ISREG
from typing import IO, BinaryIO
from urllib.parse import quote, urlencode

from buildbay.storage.base import (
    LIST_PAGE,
    READ_BLOCK,
    BodyTooLarge,
    BodyTooShort,
    Digests,
    Hashes,
    MultipartUpload,
    ObjectInfo,
    ObjectNotFound,
    PartInfo,
    StorageUnavailable,
    UploadTarget,
    digests_of,
)
from buildbay.storage.disk import (
    WRITERS,
    FileWriter,
    fsync_dir,
    gather_blocks,
    read_sidecar,
    remove_unlocked_files,
    settled,
    sidecar_of,
    sidecar_text,
    storage_error,
)
from buildbay.storage.local_multipart import MultipartUploads
from buildbay.storage.signing import UrlSigner

UPLOAD_PATH = "/storage/uploads/"
DOWNLOAD_PATH = "/storage/files/"
PART_PATH = "/storage/parts/"
LOCK_STRIPES = 64


class LocalStorage:
    def __init__(self, root: Path, public_url: str, signer: UrlSigner) -> None:
        self.root = root.resolve()
        self._objects = self.root / "objects"
        self._incoming = self.root / "incoming"
        self._public_url = public_url.rstrip("/")
        self._signer = signer
        self._objects.mkdir(parents=True, exist_ok=True)
        self._incoming.mkdir(parents=True, exist_ok=True)
        self._locks = self.root / "locks"
        self._locks.mkdir(parents=True, exist_ok=True)
        self._uploads = MultipartUploads(self.root / "multipart", self.path_of)

    # -- URLs --------------------------------------------------------------------------------------

    async def upload_target(
        self, key: str, size: int, expires_at: datetime, sha256: str | None
    ) -> UploadTarget:
        expires = int(expires_at.timestamp())
        query = urlencode(
            {
                "size": size,
                "expires": expires,
                "signature": self._signer.sign("PUT", key, expires, size),
            }
        )
        return UploadTarget(url=f"{self._public_url}{UPLOAD_PATH}{quote(key)}?{query}")

    async def download_url(
        self, key: str, file_name: str, expires_at: datetime, version: str | None = None
    ) -> str:
        # One version per key here: the guard keeps a verified object's bytes as they are.
        expires = int(expires_at.timestamp())
        signature = self._signer.sign("GET", f"{key}\n{file_name}", expires)
        query = urlencode({"name": file_name, "expires": expires, "signature": signature})
        return f"{self._public_url}{DOWNLOAD_PATH}{quote(key)}?{query}"

    async def part_target(
        self, key: str, upload_id: str, number: int, size: int, expires_at: datetime
    ) -> UploadTarget:
        expires = int(expires_at.timestamp())
        query = urlencode(
            {
                "part": number,
                "size": size,
                "expires": expires,
                "signature": self._signer.sign("PUT", part_resource(key, number), expires, size),
            }
        )
        return UploadTarget(url=f"{self._public_url}{PART_PATH}{quote(key)}?{query}")

    # -- objects -----------------------------------------------------------------------------------

    def path_of(self, key: str) -> Path:
        path = (self._objects / key).resolve()
        if not path.is_relative_to(self._objects) or path == self._objects:
            raise ObjectNotFound("No stored object under this key")
        return path

    async def stat(self, key: str) -> ObjectInfo | None:
        return await asyncio.to_thread(self._stat, self.path_of(key))

    @staticmethod
    def _stat(path: Path) -> ObjectInfo | None:
        try:
            st = path.stat()
        except FileNotFoundError:
            return None
        if not S_ISREG(st.st_mode):
            return None  # a directory of objects (a key prefix) is not an object
        sha256, sha512 = read_sidecar(path, st.st_size, st.st_ino)
        return ObjectInfo(size=st.st_size, sha256=sha256, sha512=sha512)

    async def put(self, key: str, source: IO[bytes], size: int, content_type: str) -> None:
        # The same atomic install as an upload's, but the copy in one worker thread: the
        # streaming pipeline an upload needs (the loop gathering blocks from the network, a thread
        # per hash and for the write) cost the event loop a dozen thread hops and the temporary
        # file's creation per screenshot, each a delay for every request waiting behind it
        # (bench/feedback.py). The content type is the key's to say (its extension) and the
        # caller's to serve.
        copying = asyncio.ensure_future(asyncio.to_thread(self._copied, key, source, size))
        try:
            target, sink, tmp, inode = await asyncio.shield(copying)
        except asyncio.CancelledError:
            copying.add_done_callback(_discard_copy)  # the thread goes on: its file goes after
            raise
        try:
            async with self.guard(key):
                await asyncio.to_thread(_install, sink, inode, tmp, target)
        except BaseException as exc:
            await asyncio.shield(asyncio.to_thread(_discard, sink, tmp, []))
            if isinstance(exc, OSError):
                raise storage_error(exc) from exc
            raise

    def _copied(
        self, key: str, source: IO[bytes], size: int
    ) -> tuple[Path, _HashingFile, Path, int]:
        """`size` bytes of `source` (from its start) in a new temporary file, hashed and on disk
        (blocking). BodyTooShort if `source` holds fewer."""
        target = self.path_of(key)
        try:
            fd, tmp_name = tempfile.mkstemp(dir=self._incoming, prefix="upload-")
        except OSError as exc:
            raise storage_error(exc) from exc
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the sweeper leaves it alone
        tmp = Path(tmp_name)
        sink = _HashingFile(fd, with_sha512=False)  # no desktop feed names a screenshot
        try:
            source.seek(0)
            while block := source.read(READ_BLOCK):
                if sink.size + len(block) > size:
                    raise BodyTooLarge(f"The file is longer than the declared {size} bytes")
                sink.update(block)
            if sink.size < size:
                raise BodyTooShort(f"The file ended after {sink.size} of the declared {size} bytes")
            return target, sink, tmp, _finish(sink)
        except BaseException as exc:
            _discard(sink, tmp, [])
            if isinstance(exc, OSError):
                raise storage_error(exc) from exc
            raise

    async def view_url(
        self, key: str, file_name: str, content_type: str, expires_at: datetime
    ) -> str | None:
        return None  # served by the API process, which checked the request's own signature

    def open_reader(self, key: str, size: int = 0, version: str | None = None) -> BinaryIO:
        # One size and version per key here: the file is what it is.
        try:
            return self.path_of(key).open("rb")
        except (FileNotFoundError, IsADirectoryError):
            raise ObjectNotFound("No stored object under this key") from None

    async def compute_digests(
        self, key: str, version: str | None = None, with_sha512: bool = True
    ) -> Digests:
        def _hash() -> Digests:
            with self.open_reader(key) as f:
                return digests_of(f, with_sha512)

        return await asyncio.to_thread(_hash)

    async def delete(self, key: str) -> None:
        path = self.path_of(key)

        def _delete() -> None:
            for p in (sidecar_of(path), path):
                with contextlib.suppress(FileNotFoundError, IsADirectoryError):
                    p.unlink()

        async with self.guard(key):  # not while an upload is putting its bytes in place
            await asyncio.to_thread(_delete)

    async def delete_prefix(self, prefix: str) -> None:
        path = self.path_of(prefix.rstrip("/"))
        await asyncio.to_thread(shutil.rmtree, path, True)
        await self._uploads.delete_prefix(prefix)

    async def stored_keys(self, modified_before: datetime) -> AsyncIterator[list[str]]:
        # A project's directory at a time, listed in a worker thread.
        projects = await asyncio.to_thread(lambda: sorted(self._objects.iterdir()))
        for project in projects:
            keys = await asyncio.to_thread(
                _keys_under, self._objects, project, modified_before.timestamp()
            )
            for start in range(0, len(keys), LIST_PAGE):
                yield keys[start : start + LIST_PAGE]

    @contextlib.asynccontextmanager
    async def guard(self, key: str) -> AsyncIterator[None]:
        """Exclusive hold on one object: taken while an upload puts its bytes in place, while
        verify checks them and marks the build ready, and while they are deleted.

        An flock on one of a fixed set of lock files, so it holds across processes on this
        machine; taken without blocking the event loop (try, sleep, try again).
        """
        stripe = zlib.crc32(key.encode()) % LOCK_STRIPES
        # Opening a small local file takes microseconds: not worth a thread hop.
        fd = os.open(self._locks / f"{stripe}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            delay = 0.001
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 0.05)
            yield
        finally:
            os.close(fd)  # releases the lock

    async def check(self) -> None:
        def _probe() -> None:
            with tempfile.NamedTemporaryFile(dir=self._incoming, prefix="probe-"):
                pass

        try:
            await asyncio.to_thread(_probe)
        except OSError as exc:
            raise StorageUnavailable(f"The build store cannot be written: {exc.strerror}") from exc

    async def remove_abandoned_uploads(self, older_than: datetime) -> int:
        """Remove what uploads cut off by a crash left in `incoming/`: files last changed
        before `older_than` that no live upload holds. Returns how many."""
        return await asyncio.to_thread(
            remove_unlocked_files, self._incoming, older_than.timestamp()
        )

    # -- receiving an upload -----------------------------------------------------------------------

    async def receive(
        self,
        key: str,
        size: int,
        body: AsyncIterator[bytes],
        before_publish: Callable[[], Awaitable[object]] | None = None,
        with_sha512: bool = True,
    ) -> ObjectInfo:
        """Store exactly `size` bytes from `body` under `key`, with its SHA-256 (and SHA-512);
        nothing is kept on any failure.

        The event loop only gathers chunks; a block's two hashes and its write run in three
        worker threads, side by side and one block behind the network, so socket, hash and disk
        work overlap.
        Once every byte is on disk, `before_publish` runs under the key's guard and may still
        refuse (the build was verified or deleted while the bytes streamed); only then does the
        object change.
        """
        target = self.path_of(key)
        try:
            fd, tmp_name = tempfile.mkstemp(dir=self._incoming, prefix="upload-")
        except OSError as exc:
            raise storage_error(exc) from exc
        # Held until the file is closed (or this process dies): the sweeper leaves it alone.
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        tmp = Path(tmp_name)
        sink = _HashingFile(fd, with_sha512)
        # The block before the one being gathered: its hashes and its write, in three threads.
        inflight: list[concurrent.futures.Future[object]] = []
        try:
            async with contextlib.aclosing(
                gather_blocks(body, size, f"the declared {size}")
            ) as blocks:
                async for data in blocks:
                    await settled(inflight)
                    inflight = [*sink.hash(data), WRITERS.submit(sink.write, data)]
            await settled(inflight)
            if sink.size < size:
                raise BodyTooShort(f"The body ended after {sink.size} of the declared {size} bytes")
            inode = await asyncio.to_thread(_finish, sink)
            async with self.guard(key):
                if before_publish is not None:
                    await before_publish()
                info = await asyncio.to_thread(_install, sink, inode, tmp, target)
        except BaseException as exc:
            # The threads may still be writing (this task may have been cancelled): the file is
            # closed and removed only once they are done.
            await asyncio.shield(asyncio.to_thread(_discard, sink, tmp, inflight))
            if isinstance(exc, OSError):
                raise storage_error(exc) from exc
            raise
        return info

    # -- multipart uploads (local_multipart.py) ----------------------------------------------------

    async def start_multipart(self, key: str, size: int, part_size: int) -> str:
        return await self._uploads.start(key, size, part_size)

    async def list_parts(self, key: str, upload_id: str) -> list[PartInfo]:
        return await self._uploads.list_parts(key, upload_id)

    async def complete_multipart(self, key: str, upload_id: str, size: int, part_size: int) -> None:
        await self._uploads.complete(key, upload_id, size, part_size)

    async def abort_multipart(self, key: str, upload_id: str) -> None:
        await self._uploads.abort(key, upload_id)

    async def multipart_uploads(
        self, started_before: datetime
    ) -> AsyncIterator[list[MultipartUpload]]:
        async for page in self._uploads.uploads(started_before):
            yield page

    async def receive_part(
        self,
        key: str,
        number: int,
        size: int,
        body: AsyncIterator[bytes],
        with_sha512: bool = True,
    ) -> PartInfo:
        return await self._uploads.receive_part(key, number, size, body, with_sha512)


def part_resource(key: str, number: int) -> str:
    """What a part's signed URL is bound to: the object and the part's number."""
    return f"{key}\npart {number}"


class _HashingFile:
    def __init__(self, fd: int, with_sha512: bool) -> None:
        self.fd = fd
        self._hashes = Hashes(with_sha512)
        self._file = FileWriter(fd)
        self.digests = Digests("")
        self.closed = False

    @property
    def size(self) -> int:
        return self._file.position

    def hash(self, block: list[bytes]) -> list[concurrent.futures.Future[object]]:
        """The block's two hashes, each in a thread of WRITERS."""
        return self._hashes.submit(WRITERS, block)

    def write(self, block: list[bytes]) -> None:
        self._file.write(block)

    def update(self, data: bytes) -> None:
        """Hash and write `data` here (blocking: a worker thread's)."""
        self._hashes.update(data)
        self._file.write([data])

    def finish(self) -> None:
        os.fsync(self.fd)
        self.digests = self._hashes.digests()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            os.close(self.fd)


def _discard_copy(copying: asyncio.Future[tuple[Path, _HashingFile, Path, int]]) -> None:
    """What the thread of a cancelled `put` made, removed once it is done."""
    if not copying.cancelled() and copying.exception() is None:
        _, sink, tmp, _ = copying.result()
        _discard(sink, tmp, [])


def _finish(sink: _HashingFile) -> int:
    """fsync: the bytes are on disk before any name points at them."""
    sink.finish()
    inode = os.fstat(sink.fd).st_ino
    sink.close()
    return inode


def _install(sink: _HashingFile, inode: int, tmp: Path, target: Path) -> ObjectInfo:
    """Put the finished file in place atomically, with its hash beside it."""
    target.parent.mkdir(parents=True, exist_ok=True)
    sidecar = sidecar_of(target)
    # Written before anything changes: a full disk refuses it with nothing in place yet.
    sidecar_tmp = sidecar_of(tmp)
    sidecar_tmp.write_text(sidecar_text(sink.digests, sink.size, inode))
    # The old sidecar goes before the object: a crash in between leaves an object without a
    # known hash (verify then reads the bytes), never a hash that describes other bytes.
    with contextlib.suppress(FileNotFoundError):
        sidecar.unlink()
    tmp.replace(target)
    fsync_dir(target.parent)
    sidecar_tmp.replace(sidecar)
    return ObjectInfo(size=sink.size, sha256=sink.digests.sha256, sha512=sink.digests.sha512)


def _discard(
    sink: _HashingFile, tmp: Path, inflight: list[concurrent.futures.Future[object]]
) -> None:
    concurrent.futures.wait(inflight)
    with contextlib.suppress(OSError):
        sink.close()
    for path in (tmp, sidecar_of(tmp)):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def _keys_under(objects: Path, directory: Path, modified_before: float) -> list[str]:
    """Keys of the objects under `directory` last written before `modified_before`. An object's
    sidecar stands for it: a sidecar left without its object is listed too, and goes with it."""
    keys: set[str] = set()
    for folder, _, names in os.walk(directory):
        for name in names:
            path = Path(folder, name)
            try:
                if path.lstat().st_mtime >= modified_before:
                    continue
            except FileNotFoundError:
                continue  # deleted meanwhile
            key = path.relative_to(objects).as_posix()
            keys.add(key.removesuffix(".sha256"))
    return sorted(keys)

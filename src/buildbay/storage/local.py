"""Build files on the local disk, served and received by the API process through signed URLs.

Uploads stream into a temporary file in the same directory tree while being hashed, are flushed
to disk, then renamed into place atomically: a reader sees the old object or the whole new one,
never a partial file. The SHA-256 is kept beside the object (`<object>.sha256`), tied to the
object's inode and size, so verify does not read the bytes again.

An upload holds an flock on its temporary file while it streams. A process killed in the middle
leaves the file behind, unlocked: the sweeper removes such files once they are old.

A multipart upload (a large build, in parts) lives in `multipart/<key>/`: one file of the build's
size (`data`, sparse until the parts fill it), into which each part is written at its offset, and
a marker per part that has fully arrived (`parts/<n>`). Verify flushes `data` to disk and renames
it into place: the bytes are never copied a second time. Writers of parts hold a shared flock on the
upload's `lock` while they write, verify an exclusive one while it renames; two copies of one
part are serialized by that part's own lock (`locks/<n>`), and a copy removes the part's marker
before its first byte, so a part is listed only once a whole copy of it has been written.

A part's bytes reach the disk as one PUT's do: the kernel is asked to start writing them while
they arrive, and the one fsync is verify's. Until then they may be in the page cache only, which
outlives the process (a `kill -9` loses nothing) but not the machine: a marker names the boot of
the machine it was written in (Linux's `boot_id`), and a part marked in an earlier boot is not
listed, so the client sends it again. Where no boot id can be read, each part is flushed before
its marker is written, and such markers name no boot. If verify's fsync fails, every part is
forgotten (Linux reports a failed write-back to one fsync only, so a second verify would not
know) and the client sends them again. Boots, like flocks, are one machine's: the local store is
not meant to be shared by several hosts over a network file system.

While parts arrive, a hasher of this process reads each part once the parts before it are in
(from the page cache, just written) and hashes it, so that verify need not read the whole file
again. It notes each part's marker as it was when hashed; at verify, if every marker is still
that one (no copy of a part was sent again since, by any process), its digest is kept as the
object's sidecar; otherwise verify reads the file as for any object.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import errno
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
import threading
import time
import uuid
import zlib
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from stat import S_ISREG
from typing import Any, BinaryIO, Protocol
from urllib.parse import quote, urlencode

from buildbay.storage.base import (
    LIST_PAGE,
    READ_BLOCK,
    BodyTooLarge,
    BodyTooShort,
    MultipartUpload,
    ObjectInfo,
    ObjectNotFound,
    PartInfo,
    PartsMissing,
    StorageFull,
    StorageUnavailable,
    UploadGone,
    UploadInProgress,
    UploadTarget,
    missing_parts,
    part_bounds,
    sha256_of,
)
from buildbay.storage.signing import UrlSigner

WRITE_BLOCK = 1024 * 1024  # bytes handed to the writer thread at a time
# Chunks in one block at most: one pwritev takes them all (Linux's IOV_MAX is 1024), however
# small the pieces a slow client's body arrives in.
BLOCK_CHUNKS = 512
WRITEBACK_EVERY = 8 * 1024 * 1024  # bytes written after which the kernel starts flushing them
UPLOAD_PATH = "/storage/uploads/"
DOWNLOAD_PATH = "/storage/files/"
PART_PATH = "/storage/parts/"
# Verify waits this long for the upload's lock: another verify holds it while it flushes the
# file (little is left by then: each part's write-back starts as it arrives) and renames it; a
# part being written holds it (shared) for as long as its bytes take, and is not waited for.
JOIN_WAIT_SECONDS = 1.0
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
        self._multipart = self.root / "multipart"
        self._multipart.mkdir(parents=True, exist_ok=True)
        self._hashers: dict[Path, _PartHasher] = {}

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
        sha256 = None
        with contextlib.suppress(OSError, ValueError):
            digest, size, inode = _sidecar(path).read_text().split()
            if int(size) == st.st_size and int(inode) == st.st_ino:
                sha256 = digest
        return ObjectInfo(size=st.st_size, sha256=sha256)

    def open_reader(self, key: str, size: int = 0, version: str | None = None) -> BinaryIO:
        # One size and version per key here: the file is what it is.
        try:
            return self.path_of(key).open("rb")
        except (FileNotFoundError, IsADirectoryError):
            raise ObjectNotFound("No stored object under this key") from None

    async def compute_sha256(self, key: str, version: str | None = None) -> str:
        def _hash() -> str:
            with self.open_reader(key) as f:
                return sha256_of(f)

        return await asyncio.to_thread(_hash)

    async def delete(self, key: str) -> None:
        path = self.path_of(key)

        def _delete() -> None:
            for p in (_sidecar(path), path):
                with contextlib.suppress(FileNotFoundError, IsADirectoryError):
                    p.unlink()

        async with self.guard(key):  # not while an upload is putting its bytes in place
            await asyncio.to_thread(_delete)

    async def delete_prefix(self, prefix: str) -> None:
        path = self.path_of(prefix.rstrip("/"))
        await asyncio.to_thread(shutil.rmtree, path, True)
        uploads = self._upload_dir(prefix.rstrip("/"))
        await asyncio.to_thread(shutil.rmtree, uploads, True)

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
        return await asyncio.to_thread(_remove_abandoned, self._incoming, older_than.timestamp())

    # -- receiving an upload -----------------------------------------------------------------------

    async def receive(
        self,
        key: str,
        size: int,
        body: AsyncIterator[bytes],
        before_publish: Callable[[], Awaitable[object]] | None = None,
    ) -> ObjectInfo:
        """Store exactly `size` bytes from `body` under `key`; nothing is kept on any failure.

        The event loop only gathers chunks; a block's hash and write run in two worker threads,
        side by side and one block behind the network, so socket, hash and disk work overlap.
        Once every byte is on disk, `before_publish` runs under the key's guard and may still
        refuse (the build was verified or deleted while the bytes streamed); only then does the
        object change.
        """
        target = self.path_of(key)
        try:
            fd, tmp_name = tempfile.mkstemp(dir=self._incoming, prefix="upload-")
        except OSError as exc:
            raise _os_error(exc) from exc
        # Held until the file is closed (or this process dies): the sweeper leaves it alone.
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        tmp = Path(tmp_name)
        sink = _HashingFile(fd)
        # The block before the one being gathered: its hash and its write, in two threads.
        inflight: list[concurrent.futures.Future[object]] = []
        try:
            async with contextlib.aclosing(_blocks(body, size, f"the declared {size}")) as blocks:
                async for data in blocks:
                    await _settled(inflight)
                    inflight = [_WORKERS.submit(sink.hash, data), _WORKERS.submit(sink.write, data)]
            await _settled(inflight)
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
                raise _os_error(exc) from exc
            raise
        return info

    # -- multipart uploads -------------------------------------------------------------------------

    def _upload_dir(self, key: str) -> Path:
        path = (self._multipart / key).resolve()
        if not path.is_relative_to(self._multipart) or path == self._multipart:
            raise UploadGone("No upload under this key")
        return path

    async def start_multipart(self, key: str, size: int, part_size: int) -> str:
        upload_id = uuid.uuid4().hex
        directory = self._upload_dir(key)
        # Hashers of uploads another process joined or gave up: their directory is gone.
        for gone in [d for d in self._hashers if not d.exists()]:
            self._hashers.pop(gone, None)
        self._hashers.pop(directory, None)  # an earlier upload's under this key

        def _start() -> None:
            if directory.exists():  # a key is a build's: only a crashed start leaves one behind
                shutil.rmtree(directory)
            (directory / "parts").mkdir(parents=True)
            (directory / "locks").mkdir()
            (directory / "lock").touch()
            with (directory / "data").open("wb") as data:
                data.truncate(size)  # sparse: no block is taken before its part arrives
            meta = {"uploadId": upload_id, "size": size, "partSize": part_size}
            (directory / "meta.json").write_text(json.dumps(meta))

        try:
            await asyncio.to_thread(_start)
        except OSError as exc:
            raise _os_error(exc) from exc
        return upload_id

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

    async def list_parts(self, key: str, upload_id: str) -> list[PartInfo]:
        directory = self._upload_dir(key)
        return await asyncio.to_thread(_read_parts, directory, upload_id)

    async def complete_multipart(self, key: str, upload_id: str, size: int, part_size: int) -> None:
        directory = self._upload_dir(key)
        target = self.path_of(key)
        hasher = self._hashers.get(directory)
        if hasher is not None:
            await asyncio.wrap_future(_HASHING.submit(hasher.advance))  # the last parts, if due
        try:
            await asyncio.to_thread(
                _complete, directory, upload_id, size, part_size, target, hasher
            )
        except OSError as exc:
            self._hashers.pop(directory, None)  # the parts may have been forgotten (_complete)
            raise _os_error(exc) from exc
        self._hashers.pop(directory, None)

    async def abort_multipart(self, key: str, upload_id: str) -> None:
        directory = self._upload_dir(key)

        def _abort() -> None:
            try:
                meta = _meta(directory)
            except UploadGone:
                return
            if meta["uploadId"] == upload_id:
                shutil.rmtree(directory, ignore_errors=True)

        await asyncio.to_thread(_abort)
        self._hashers.pop(directory, None)

    async def multipart_uploads(
        self, started_before: datetime
    ) -> AsyncIterator[list[MultipartUpload]]:
        found = await asyncio.to_thread(_uploads_under, self._multipart, started_before.timestamp())
        for start in range(0, len(found), LIST_PAGE):
            yield found[start : start + LIST_PAGE]

    async def receive_part(
        self, key: str, number: int, size: int, body: AsyncIterator[bytes]
    ) -> PartInfo:
        """Write part `number` (exactly `size` bytes from `body`) at its offset in the upload's
        file. Until the whole copy has been written the part is not listed; on any failure it is
        left out (a copy that was there before is overwritten in part, so it goes too)."""
        directory = self._upload_dir(key)
        meta = await asyncio.to_thread(_meta, directory)
        offset, length = part_bounds(number, meta["partSize"], meta["size"])
        if length != size or length == 0:
            raise UploadGone("This part does not belong to the upload")
        upload_lock = await asyncio.to_thread(_open_lock, directory / "lock")
        part_lock = -1
        data = -1
        try:
            await _flock(upload_lock, fcntl.LOCK_SH)  # verify's rename waits for us
            part_lock = await asyncio.to_thread(_open_lock, directory / "locks" / str(number), True)
            await _flock(part_lock, fcntl.LOCK_EX)  # another copy of this part finishes first
            data = await asyncio.to_thread(_open_part, directory, number)
            hasher = self._hashers.get(directory)
            if hasher is None:
                hasher = self._hashers[directory] = _PartHasher(
                    directory, meta["size"], meta["partSize"]
                )
            inline = hasher.begin_inline(number)  # after the old copy's marker went
            received = await _write_at(data, offset, size, body, hasher.writes, inline)
            if received < size:
                raise BodyTooShort(f"The body ended after {received} of the part's {size} bytes")
            if BOOT_ID is None:
                await asyncio.to_thread(os.fdatasync, data)
            part, marker = await asyncio.to_thread(_mark_part, directory, number, size)
            if inline is not None:
                hasher.finish_inline(number, inline, marker)
            _HASHING.submit(hasher.advance)  # not waited for: the part has arrived
            return part
        except OSError as exc:
            if isinstance(exc, FileNotFoundError):
                raise UploadGone("The upload was completed or given up meanwhile") from exc
            raise _os_error(exc) from exc
        finally:
            for fd in (data, part_lock, upload_lock):
                if fd >= 0:
                    os.close(fd)


# Hashing parts in order while more arrive: one thread per upload at most, a few uploads at once.
_HASHING = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="part-hash")


class _Digest(Protocol):
    """What a hashlib hash object offers that the hasher uses."""

    def update(self, data: bytes, /) -> None: ...

    def copy(self) -> _Digest: ...

    def hexdigest(self) -> str: ...


class _PartHasher:
    """The SHA-256 of an upload's parts from the first, advanced as they arrive. `seen` holds
    each hashed part's marker identity, which says the bytes are still those that were hashed.

    A part that is next in line when its copy begins is hashed on the way in, as one PUT is
    (`begin_inline`, `finish_inline`); the others are read back by `advance` (blocking: a
    thread's) once the parts before them are in. `_state` guards `digest` and `seen` and is only
    held for moments; `_running` lets one `advance` run at a time.

    `writes` is held by each block's write into the upload's file: the kernel writes into one
    file one call at a time anyway (ext4 holds the inode's lock), and threads that wait here
    sleep, where in the kernel they would spin."""

    def __init__(self, directory: Path, size: int, part_size: int) -> None:
        self.directory, self.size, self.part_size = directory, size, part_size
        self.count = -(-size // part_size)
        self._state = threading.Lock()
        self._running = threading.Lock()
        self._again = False
        self.digest: _Digest = hashlib.sha256()
        self.seen: dict[int, tuple[int, int]] = {}
        self.writes = threading.Lock()

    def begin_inline(self, number: int) -> _Digest | None:
        """A digest to hash part `number` into as it arrives, if it is next in line."""
        with self._state:
            return self.digest.copy() if len(self.seen) + 1 == number else None

    def finish_inline(self, number: int, digest: _Digest, marker: tuple[int, int]) -> None:
        """Part `number` arrived whole, hashed into `digest`; `marker` is its marker's identity."""
        with self._state:
            if len(self.seen) + 1 == number:  # else `advance` read it back first
                self.digest = digest
                self.seen[number] = marker

    def advance(self) -> None:
        """Hash every part that is next in line and has arrived. Another call while one runs
        has that one look again once it is done."""
        if not self._running.acquire(blocking=False):
            self._again = True
            return
        try:
            self._again = True
            while self._again:
                self._again = False
                with contextlib.suppress(OSError):
                    self._hash_next_parts()
        finally:
            self._running.release()

    def _hash_next_parts(self) -> None:
        while True:
            with self._state:
                number = len(self.seen) + 1
                digest = self.digest.copy()
            if number > self.count:
                return
            marker = self.directory / "parts" / str(number)
            before = _identity(marker)
            if before is None or not _of_this_boot(marker):
                return  # not arrived yet (or before the machine restarted: it is sent again)
            offset, length = part_bounds(number, self.part_size, self.size)
            fd = os.open(self.directory / "data", os.O_RDONLY)
            try:
                done = 0
                while done < length:
                    block = os.pread(fd, min(READ_BLOCK, length - done), offset + done)
                    if not block:
                        return
                    digest.update(block)
                    done += len(block)
            finally:
                os.close(fd)
            if _identity(marker) != before:
                return  # a new copy began meanwhile: hashed once it has arrived
            with self._state:
                if len(self.seen) + 1 == number:  # else hashed on the way in meanwhile
                    self.digest = digest
                    self.seen[number] = before

    def sha256_if_current(self) -> str | None:
        """The whole file's digest, if every part was hashed and none changed since (waits for
        an `advance` that is running)."""
        with self._running, self._state:
            if len(self.seen) != self.count:
                return None
            for number, identity in self.seen.items():
                if _identity(self.directory / "parts" / str(number)) != identity:
                    return None
            return self.digest.hexdigest()


def _identity(marker: Path) -> tuple[int, int] | None:
    """A part marker's inode and change time: every copy of a part writes a new marker."""
    try:
        st = marker.stat()
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_mtime_ns


def part_resource(key: str, number: int) -> str:
    """What a part's signed URL is bound to: the object and the part's number."""
    return f"{key}\npart {number}"


def _meta(directory: Path) -> dict[str, Any]:
    try:
        meta: dict[str, Any] = json.loads((directory / "meta.json").read_text())
    except (FileNotFoundError, NotADirectoryError):
        raise UploadGone("This upload was completed or given up") from None
    return meta


def _open_lock(path: Path, create: bool = False) -> int:
    try:
        return os.open(path, os.O_RDWR | (os.O_CREAT if create else 0), 0o600)
    except FileNotFoundError:
        raise UploadGone("This upload was completed or given up") from None


async def _flock(fd: int, operation: int) -> None:
    """Take an flock without blocking the event loop (try, sleep, try again)."""
    delay = 0.001
    while True:
        try:
            fcntl.flock(fd, operation | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.05)


def _open_part(directory: Path, number: int) -> int:
    """The upload's file, for writing one part: its marker goes first (the copy on disk is about
    to change). Under the upload's shared lock: `data` is gone once verify has renamed it."""
    fd = os.open(directory / "data", os.O_WRONLY)
    with contextlib.suppress(FileNotFoundError):
        (directory / "parts" / str(number)).unlink()
    return fd


async def _write_at(
    fd: int,
    offset: int,
    size: int,
    body: AsyncIterator[bytes],
    lock: threading.Lock,
    digest: _Digest | None = None,
) -> int:
    """Write `body` at `offset` (and hash it into `digest`, if given), a block at a time in
    worker threads, one block behind the network (as `receive` does), each write under `lock`;
    refuse past `size`. The write-back of the last bytes starts at the end too, so that
    verify's fsync has little left to wait for. Every write is done when it returns or raises,
    so the caller may close `fd`. Returns how many bytes were written."""
    writer = _FileWriter(fd, offset, lock)
    inflight: list[concurrent.futures.Future[object]] = []
    try:
        async with contextlib.aclosing(_blocks(body, size, f"the part's {size}")) as blocks:
            async for data in blocks:
                await _settled(inflight)  # every block before this one is written
                inflight = [_WORKERS.submit(writer.write, data)]
                if digest is not None:
                    inflight.append(_WORKERS.submit(_hash_all, digest, data))
        await _settled(inflight)
        await asyncio.to_thread(writer.write_back)
    except BaseException:
        await asyncio.shield(asyncio.to_thread(concurrent.futures.wait, inflight))
        raise
    return writer.position - offset


async def _blocks(
    body: AsyncIterator[bytes], size: int, declared: str
) -> AsyncGenerator[list[bytes], None]:
    """`body` gathered into blocks of WRITE_BLOCK bytes or more, or of BLOCK_CHUNKS chunks (the
    last one what is left), so that the threads that hash and write get few, large pieces of
    work. A block is the list of the chunks as they came: joining them would copy every byte
    once more. BodyTooLarge as soon as the body passes `size` bytes (`declared` names that
    size: "the declared 10")."""
    block: list[bytes] = []
    gathered = received = 0
    async for chunk in body:
        received += len(chunk)
        if received > size:
            raise BodyTooLarge(f"The body is longer than {declared} bytes")
        if chunk:
            block.append(chunk)
        gathered += len(chunk)
        if gathered >= WRITE_BLOCK or len(block) >= BLOCK_CHUNKS:
            yield block
            block = []
            gathered = 0
    if block:
        yield block


def _hash_all(digest: _Digest, block: list[bytes]) -> None:
    for chunk in block:
        digest.update(chunk)


def _pwrite_all(
    fd: int, block: list[bytes], offset: int, lock: threading.Lock | None = None
) -> int:
    """Write the block's chunks at `offset` with one pwritev (the kernel gathers them), under
    `lock` if given; a short write goes on where it stopped. Returns how many bytes."""
    views = [memoryview(chunk) for chunk in block]
    done = 0
    with lock or contextlib.nullcontext():
        while views:
            written = os.pwritev(fd, views, offset + done)
            done += written
            while views and written >= len(views[0]):
                written -= len(views.pop(0))
            if written:
                views[0] = views[0][written:]
    return done


def _boot_id() -> str | None:
    """This boot of the machine (Linux: a random id the kernel draws at boot), or None."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip() or None
    except OSError:
        return None


# The boot parts are marked in; None: parts are flushed before they are marked.
BOOT_ID = _boot_id()


def _names_this_boot(marker_text: str) -> bool:
    """Whether a marker was written in this boot of the machine (or names none: it was flushed
    before it was written)."""
    boot = marker_text.partition(" ")[2]
    return not boot or boot == BOOT_ID


def _of_this_boot(marker: Path) -> bool:
    try:
        return _names_this_boot(marker.read_text())
    except FileNotFoundError:
        return False


def _mark_part(directory: Path, number: int, size: int) -> tuple[PartInfo, tuple[int, int]]:
    """The part's marker, written whole under its name; the part and the marker's identity."""
    marker = directory / "parts" / str(number)
    tmp = directory / "parts" / f".{number}.{uuid.uuid4().hex}"
    tmp.write_text(f"{size} {BOOT_ID}" if BOOT_ID is not None else str(size))
    st = tmp.stat()
    tmp.replace(marker)
    received = datetime.fromtimestamp(st.st_mtime, UTC)
    return PartInfo(number, size, received), (st.st_ino, st.st_mtime_ns)


def _read_parts(directory: Path, upload_id: str) -> list[PartInfo]:
    if _meta(directory)["uploadId"] != upload_id:
        raise UploadGone("This upload was completed or given up")
    parts = []
    for path in (directory / "parts").iterdir():
        if not path.name.isdigit():
            continue  # a marker being written
        try:
            text = path.read_text()
            size = int(text.partition(" ")[0])
            received = path.stat().st_mtime
        except (FileNotFoundError, ValueError):
            continue  # a new copy of the part has begun
        if not _names_this_boot(text):
            continue  # marked before the machine restarted: its bytes may not be on disk
        parts.append(PartInfo(int(path.name), size, datetime.fromtimestamp(received, UTC)))
    return sorted(parts, key=lambda p: p.number)


def _complete(
    directory: Path,
    upload_id: str,
    size: int,
    part_size: int,
    target: Path,
    hasher: _PartHasher | None,
) -> None:
    fd = _open_lock(directory / "lock")
    try:
        try:
            _flock_within(fd, fcntl.LOCK_EX, JOIN_WAIT_SECONDS)
        except BlockingIOError:
            # A part is being written: it is not listed until it is whole.
            missing = missing_parts(_read_parts(directory, upload_id), size, part_size)
            if missing:
                raise PartsMissing(missing) from None
            raise UploadInProgress(
                "A part is being sent again, or the parts are being joined, right now; "
                "verify again once that is done"
            ) from None
        missing = missing_parts(_read_parts(directory, upload_id), size, part_size)
        if missing:
            raise PartsMissing(missing)
        # Under the exclusive lock no part changes: the hash, if current, is the file's.
        sha256 = hasher.sha256_if_current() if hasher is not None else None
        target.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            _sidecar(target).unlink()
        data = directory / "data"
        try:
            inode = _flush(data)
        except OSError:
            # Linux reports a failed write-back to one fsync only: a verify that tried again
            # would find the file flushed, with bytes that never reached the disk. The parts
            # are forgotten instead, and the client sends them again.
            _forget_parts(directory)
            raise
        data.replace(target)  # the bytes stay where the parts put them
        _fsync_dir(target.parent)
        if sha256 is not None:
            _sidecar(target).write_text(f"{sha256} {size} {inode}\n")
        shutil.rmtree(directory, ignore_errors=True)
    finally:
        os.close(fd)


def _forget_parts(directory: Path) -> None:
    for marker in (directory / "parts").iterdir():
        with contextlib.suppress(FileNotFoundError):
            marker.unlink()


def _flush(path: Path) -> int:
    """fsync the file at `path` (its bytes are on disk before a name points at them); its inode."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        return os.fstat(fd).st_ino
    finally:
        os.close(fd)


def _flock_within(fd: int, operation: int, seconds: float) -> None:
    """Take an flock, trying again for up to `seconds` (blocking: a thread's); BlockingIOError
    if it stayed taken."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            fcntl.flock(fd, operation | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.01)


def _uploads_under(root: Path, started_before: float) -> list[MultipartUpload]:
    found = []
    for folder, _, names in os.walk(root):
        if "meta.json" not in names:
            continue
        meta = Path(folder, "meta.json")
        try:
            if meta.stat().st_mtime >= started_before:
                continue
            upload_id = json.loads(meta.read_text())["uploadId"]
        except (FileNotFoundError, ValueError, KeyError):
            continue
        found.append(MultipartUpload(Path(folder).relative_to(root).as_posix(), upload_id))
    return found


# Hashing and writing release the GIL: each block's two run side by side, while the event loop
# gathers the next one. Two threads per upload in progress; more uploads queue for them.
_WORKERS = concurrent.futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix="upload")


async def _settled(futures: list[concurrent.futures.Future[object]]) -> None:
    """Wait for every one of `futures`, then raise the first error among them."""
    for future in futures:
        await asyncio.wrap_future(future)


class _FileWriter:
    """Writes blocks into `fd` one after another from `offset` on (one pwritev each, under
    `lock` if given), and has the kernel start writing them to disk every WRITEBACK_EVERY
    bytes. Its calls must not overlap: a block is written once the one before it is."""

    def __init__(self, fd: int, offset: int = 0, lock: threading.Lock | None = None) -> None:
        self.fd = fd
        self.position = self._written_back = offset
        self._lock = lock

    def write(self, block: list[bytes]) -> None:
        self.position += _pwrite_all(self.fd, block, self.position, self._lock)
        if self.position - self._written_back >= WRITEBACK_EVERY:
            self.write_back()

    def write_back(self) -> None:
        """Start the write-back of what was written since the last one."""
        if self.position > self._written_back:
            _start_writeback(self.fd, self._written_back, self.position - self._written_back)
            self._written_back = self.position


class _HashingFile:
    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._hash = hashlib.sha256()
        self._file = _FileWriter(fd)
        self.hexdigest = ""
        self.closed = False

    @property
    def size(self) -> int:
        return self._file.position

    def hash(self, block: list[bytes]) -> None:
        _hash_all(self._hash, block)

    def write(self, block: list[bytes]) -> None:
        self._file.write(block)

    def finish(self) -> None:
        os.fsync(self.fd)
        self.hexdigest = self._hash.hexdigest()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            os.close(self.fd)


def _start_writeback(fd: int, offset: int, length: int) -> None:
    """Have the kernel start writing these bytes to disk now, while more arrive, rather than all
    in the final fsync, which then has little left to wait for (it still decides durability).

    On Linux, POSIX_FADV_DONTNEED starts the writeback of the range's dirty pages without waiting
    for it; it also drops those already on disk from the page cache, which suits a just-uploaded
    build: nothing reads it back soon (verify uses the hash computed on the way in).
    """
    if hasattr(os, "posix_fadvise"):
        with contextlib.suppress(OSError):  # a hint: an upload does not fail for it
            os.posix_fadvise(fd, offset, length, os.POSIX_FADV_DONTNEED)


def _finish(sink: _HashingFile) -> int:
    """fsync: the bytes are on disk before any name points at them."""
    sink.finish()
    inode = os.fstat(sink.fd).st_ino
    sink.close()
    return inode


def _install(sink: _HashingFile, inode: int, tmp: Path, target: Path) -> ObjectInfo:
    """Put the finished file in place atomically, with its hash beside it."""
    target.parent.mkdir(parents=True, exist_ok=True)
    sidecar = _sidecar(target)
    # Written before anything changes: a full disk refuses it with nothing in place yet.
    sidecar_tmp = _sidecar(tmp)
    sidecar_tmp.write_text(f"{sink.hexdigest} {sink.size} {inode}\n")
    # The old sidecar goes before the object: a crash in between leaves an object without a
    # known hash (verify then reads the bytes), never a hash that describes other bytes.
    with contextlib.suppress(FileNotFoundError):
        sidecar.unlink()
    tmp.replace(target)
    _fsync_dir(target.parent)
    sidecar_tmp.replace(sidecar)
    return ObjectInfo(size=sink.size, sha256=sink.hexdigest)


def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def _discard(
    sink: _HashingFile, tmp: Path, inflight: list[concurrent.futures.Future[object]]
) -> None:
    concurrent.futures.wait(inflight)
    with contextlib.suppress(OSError):
        sink.close()
    for path in (tmp, _sidecar(tmp)):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def _remove_abandoned(incoming: Path, older_than: float) -> int:
    removed = 0
    for path in incoming.iterdir():
        try:
            st = path.lstat()
            if not S_ISREG(st.st_mode) or st.st_mtime >= older_than:
                continue
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            continue  # an upload still streams into it (a very slow one)
        else:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()  # under the lock: no upload can take it meanwhile
                removed += 1
        finally:
            os.close(fd)
    return removed


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


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _os_error(exc: OSError) -> StorageFull | StorageUnavailable:
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return StorageFull("The build store is full; nothing of this upload was kept")
    return StorageUnavailable(f"The build store failed: {exc.strerror or exc}")

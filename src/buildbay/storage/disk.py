"""How the local store puts a body on the disk, for a whole upload (local.py) and for a part
of a multipart one (local_multipart.py) alike.

The event loop gathers the body's chunks into blocks (`gather_blocks`); worker threads hash and
write each block (`WRITERS`, `FileWriter`), one block behind the network, so that socket, hash
and disk work overlap. The kernel is asked to start writing the bytes while more arrive
(`start_writeback`), so that the one fsync at the end has little left to wait for.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import errno
import fcntl
import os
import threading
from collections.abc import AsyncGenerator, AsyncIterator
from pathlib import Path
from stat import S_ISREG

from buildbay.storage.base import BodyTooLarge, Digests, StorageFull, StorageUnavailable

WRITE_BLOCK = 1024 * 1024  # bytes handed to the writer thread at a time
# Chunks in one block at most: one pwritev takes them all (Linux's IOV_MAX is 1024), however
# small the pieces a slow client's body arrives in.
BLOCK_CHUNKS = 512
WRITEBACK_EVERY = 8 * 1024 * 1024  # bytes written after which the kernel starts flushing them

# Hashing and writing release the GIL: a block's SHA-256, SHA-512 and write run side by side,
# while the event loop gathers the next one. Three threads per upload in progress; more uploads
# queue for them.
WRITERS = concurrent.futures.ThreadPoolExecutor(max_workers=12, thread_name_prefix="upload")


async def gather_blocks(
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


async def settled(futures: list[concurrent.futures.Future[object]]) -> None:
    """Wait for every one of `futures`, then raise the first error among them."""
    for future in futures:
        await asyncio.wrap_future(future)


def pwrite_all(fd: int, block: list[bytes], offset: int, lock: threading.Lock | None = None) -> int:
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


class FileWriter:
    """Writes blocks into `fd` one after another from `offset` on (one pwritev each, under
    `lock` if given), and has the kernel start writing them to disk every WRITEBACK_EVERY
    bytes. Its calls must not overlap: a block is written once the one before it is."""

    def __init__(self, fd: int, offset: int = 0, lock: threading.Lock | None = None) -> None:
        self.fd = fd
        self.position = self._written_back = offset
        self._lock = lock

    def write(self, block: list[bytes]) -> None:
        self.position += pwrite_all(self.fd, block, self.position, self._lock)
        if self.position - self._written_back >= WRITEBACK_EVERY:
            self.write_back()

    def write_back(self) -> None:
        """Start the write-back of what was written since the last one."""
        if self.position > self._written_back:
            start_writeback(self.fd, self._written_back, self.position - self._written_back)
            self._written_back = self.position


def start_writeback(fd: int, offset: int, length: int) -> None:
    """Have the kernel start writing these bytes to disk now, while more arrive, rather than all
    in the final fsync, which then has little left to wait for (it still decides durability).

    On Linux, POSIX_FADV_DONTNEED starts the writeback of the range's dirty pages without waiting
    for it; it also drops those already on disk from the page cache, which suits a just-uploaded
    build: nothing reads it back soon (verify uses the hash computed on the way in).
    """
    if hasattr(os, "posix_fadvise"):
        with contextlib.suppress(OSError):  # a hint: an upload does not fail for it
            os.posix_fadvise(fd, offset, length, os.POSIX_FADV_DONTNEED)


def sidecar_of(path: Path) -> Path:
    """Where the SHA-256 and SHA-512 of the object at `path` are kept, beside it."""
    return path.with_name(path.name + ".sha256")


def sidecar_text(digests: Digests, size: int, inode: int) -> str:
    """A sidecar: the digests, and the size and inode of the object they describe. (Its first
    three fields were its only ones before the SHA-512 joined them.)"""
    sha512 = f" {digests.sha512}" if digests.sha512 is not None else ""
    return f"{digests.sha256} {size} {inode}{sha512}\n"


def read_sidecar(path: Path, size: int, inode: int) -> tuple[str | None, str | None]:
    """The SHA-256 and SHA-512 kept beside the object at `path`, if they describe an object
    of this size and inode (None for each that is not known)."""
    try:
        fields = sidecar_of(path).read_text().split()
        if int(fields[1]) != size or int(fields[2]) != inode:
            return None, None
    except (OSError, ValueError, IndexError):
        return None, None
    return fields[0], fields[3] if len(fields) > 3 else None


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def storage_error(exc: OSError) -> StorageFull | StorageUnavailable:
    """The storage's error for a failure of the disk."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return StorageFull("The build store is full; nothing of this upload was kept")
    return StorageUnavailable(f"The build store failed: {exc.strerror or exc}")


def remove_unlocked_files(directory: Path, older_than: float, prefix: str = "") -> int:
    """Remove the files of `directory` whose names start with `prefix`, last changed before
    `older_than` (a timestamp), that no process holds locked (`fcntl.flock`): what a crash cut
    off there. Returns how many (none if there is no such directory)."""
    removed = 0
    try:
        paths = list(directory.iterdir())
    except FileNotFoundError:  # never made: nothing there
        return 0
    for path in paths:
        if not path.name.startswith(prefix):
            continue
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
            continue  # still in use (a very slow upload, say)
        else:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()  # under the lock: no one can take it meanwhile
                removed += 1
        finally:
            os.close(fd)
    return removed

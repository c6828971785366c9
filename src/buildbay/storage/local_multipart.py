"""Multipart uploads on the local disk: a large build sent in parts, each to a signed URL of its
own (local.py makes the URLs and stores the joined object; this module receives, lists, joins and
gives up the parts).

An upload lives in `multipart/<key>/`: one file of the build's size (`data`, sparse until the
parts fill it), into which each part is written at its offset, and a marker per part that has
fully arrived (`parts/<n>`). Verify flushes `data` to disk and renames it into place: the bytes
are never copied a second time. Writers of parts hold a shared flock on the upload's `lock` while
they write, verify an exclusive one while it renames; two copies of one part are serialized by
that part's own lock (`locks/<n>`), and a copy removes the part's marker before its first byte,
so a part is listed only once a whole copy of it has been written.

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
that one (no copy of a part was sent again since, by any process), its digests are kept as the
object's sidecar; otherwise verify reads the file as for any object.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import fcntl
import json
import os
import shutil
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from buildbay.storage.base import (
    LIST_PAGE,
    READ_BLOCK,
    BodyTooShort,
    Digests,
    Hashes,
    MultipartUpload,
    PartInfo,
    PartsMissing,
    UploadGone,
    UploadInProgress,
    missing_parts,
    part_bounds,
)
from buildbay.storage.disk import (
    WRITERS,
    FileWriter,
    fsync_dir,
    gather_blocks,
    settled,
    sidecar_of,
    sidecar_text,
    storage_error,
)

# Verify waits this long for the upload's lock: another verify holds it while it flushes the
# file (little is left by then: each part's write-back starts as it arrives) and renames it; a
# part being written holds it (shared) for as long as its bytes take, and is not waited for.
JOIN_WAIT_SECONDS = 1.0


class MultipartUploads:
    """The multipart uploads under `root` (the local store's `multipart/`); a joined upload
    becomes the object at `path_of(key)`."""

    def __init__(self, root: Path, path_of: Callable[[str], Path]) -> None:
        self._root = root
        self._path_of = path_of
        self._root.mkdir(parents=True, exist_ok=True)
        self._hashers: dict[Path, _PartHasher] = {}

    def _upload_dir(self, key: str) -> Path:
        path = (self._root / key).resolve()
        if not path.is_relative_to(self._root) or path == self._root:
            raise UploadGone("No upload under this key")
        return path

    async def start(self, key: str, size: int, part_size: int) -> str:
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
            raise storage_error(exc) from exc
        return upload_id

    async def list_parts(self, key: str, upload_id: str) -> list[PartInfo]:
        directory = self._upload_dir(key)
        return await asyncio.to_thread(_read_parts, directory, upload_id)

    async def complete(self, key: str, upload_id: str, size: int, part_size: int) -> None:
        directory = self._upload_dir(key)
        target = self._path_of(key)
        hasher = self._hashers.get(directory)
        if hasher is not None:
            await asyncio.wrap_future(_HASHING.submit(hasher.advance))  # the last parts, if due
        try:
            await asyncio.to_thread(
                _complete, directory, upload_id, size, part_size, target, hasher
            )
        except OSError as exc:
            self._hashers.pop(directory, None)  # the parts may have been forgotten (_complete)
            raise storage_error(exc) from exc
        self._hashers.pop(directory, None)

    async def abort(self, key: str, upload_id: str) -> None:
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

    async def uploads(self, started_before: datetime) -> AsyncIterator[list[MultipartUpload]]:
        """The uploads started before `started_before`, a page at a time."""
        found = await asyncio.to_thread(_uploads_under, self._root, started_before.timestamp())
        for start in range(0, len(found), LIST_PAGE):
            yield found[start : start + LIST_PAGE]

    async def receive_part(
        self,
        key: str,
        number: int,
        size: int,
        body: AsyncIterator[bytes],
        with_sha512: bool = True,
    ) -> PartInfo:
        """Write part `number` (exactly `size` bytes from `body`) at its offset in the upload's
        file. Until the whole copy has been written the part is not listed; on any failure it is
        left out (a copy that was there before is overwritten in part, so it goes too). The
        upload's first part decides whether its parts are hashed through SHA-512 too."""
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
                    directory, meta["size"], meta["partSize"], with_sha512
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
            raise storage_error(exc) from exc
        finally:
            for fd in (data, part_lock, upload_lock):
                if fd >= 0:
                    os.close(fd)

    async def delete_prefix(self, prefix: str) -> None:
        """Remove every upload under `prefix` (a project's, an application's)."""
        await asyncio.to_thread(shutil.rmtree, self._upload_dir(prefix.rstrip("/")), True)


# Hashing parts in order while more arrive: one thread per upload at most, a few uploads at once.
_HASHING = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="part-hash")


class _PartHasher:
    """The SHA-256 and SHA-512 of an upload's parts from the first, advanced as they arrive.
    `seen` holds each hashed part's marker identity, which says the bytes are still those that
    were hashed.

    A part that is next in line when its copy begins is hashed on the way in, as one PUT is
    (`begin_inline`, `finish_inline`); the others are read back by `advance` (blocking: a
    thread's) once the parts before them are in. `_state` guards `hashes` and `seen` and is only
    held for moments; `_running` lets one `advance` run at a time.

    `writes` is held by each block's write into the upload's file: the kernel writes into one
    file one call at a time anyway (ext4 holds the inode's lock), and threads that wait here
    sleep, where in the kernel they would spin."""

    def __init__(self, directory: Path, size: int, part_size: int, with_sha512: bool) -> None:
        self.directory, self.size, self.part_size = directory, size, part_size
        self.count = -(-size // part_size)
        self._state = threading.Lock()
        self._running = threading.Lock()
        self._again = False
        self.hashes = Hashes(with_sha512)
        self.seen: dict[int, tuple[int, int]] = {}
        self.writes = threading.Lock()

    def begin_inline(self, number: int) -> Hashes | None:
        """Hashes to hash part `number` into as it arrives, if it is next in line."""
        with self._state:
            return self.hashes.copy() if len(self.seen) + 1 == number else None

    def finish_inline(self, number: int, hashes: Hashes, marker: tuple[int, int]) -> None:
        """Part `number` arrived whole, hashed into `hashes`; `marker` is its marker's identity."""
        with self._state:
            if len(self.seen) + 1 == number:  # else `advance` read it back first
                self.hashes = hashes
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
                hashes = self.hashes.copy()
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
                    hashes.update(block)
                    done += len(block)
            finally:
                os.close(fd)
            if _identity(marker) != before:
                return  # a new copy began meanwhile: hashed once it has arrived
            with self._state:
                if len(self.seen) + 1 == number:  # else hashed on the way in meanwhile
                    self.hashes = hashes
                    self.seen[number] = before

    def digests_if_current(self) -> Digests | None:
        """The whole file's digests, if every part was hashed and none changed since (waits for
        an `advance` that is running)."""
        with self._running, self._state:
            if len(self.seen) != self.count:
                return None
            for number, identity in self.seen.items():
                if _identity(self.directory / "parts" / str(number)) != identity:
                    return None
            return self.hashes.digests()


def _identity(marker: Path) -> tuple[int, int] | None:
    """A part marker's inode and change time: every copy of a part writes a new marker."""
    try:
        st = marker.stat()
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_mtime_ns


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
    hashes: Hashes | None = None,
) -> int:
    """Write `body` at `offset` (and hash it into `hashes`, if given), a block at a time in
    worker threads, one block behind the network (as `receive` does), each write under `lock`;
    refuse past `size`. The write-back of the last bytes starts at the end too, so that
    verify's fsync has little left to wait for. Every write is done when it returns or raises,
    so the caller may close `fd`. Returns how many bytes were written."""
    writer = FileWriter(fd, offset, lock)
    inflight: list[concurrent.futures.Future[object]] = []
    try:
        async with contextlib.aclosing(gather_blocks(body, size, f"the part's {size}")) as blocks:
            async for data in blocks:
                await settled(inflight)  # every block before this one is written
                inflight = [WRITERS.submit(writer.write, data)]
                if hashes is not None:
                    inflight += hashes.submit(WRITERS, data)
        await settled(inflight)
        await asyncio.to_thread(writer.write_back)
    except BaseException:
        await asyncio.shield(asyncio.to_thread(concurrent.futures.wait, inflight))
        raise
    return writer.position - offset


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
        digests = hasher.digests_if_current() if hasher is not None else None
        target.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            sidecar_of(target).unlink()
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
        fsync_dir(target.parent)
        if digests is not None:
            sidecar_of(target).write_text(sidecar_text(digests, size, inode))
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

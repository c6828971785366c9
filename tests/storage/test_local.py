"""What only the local-disk backend does: receiving a streamed body, atomically, inside its root."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
import os
import threading
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from buildbay.storage.base import BodyTooLarge, BodyTooShort, ObjectNotFound
from buildbay.storage.disk import WRITE_BLOCK
from buildbay.storage.local import LocalStorage
from tests.storage.conftest import chunks_of, new_key


def files_under(path: Path) -> list[Path]:
    return sorted(p for p in path.rglob("*") if p.is_file())


def incoming(local: LocalStorage) -> list[Path]:
    return files_under(local.root / "incoming")


async def test_receive_streams_many_chunks_and_stores_exactly_the_bytes(
    local: LocalStorage,
) -> None:
    # Odd chunk sizes so the writer's blocks never line up with the chunks.
    data = os.urandom(2 * WRITE_BLOCK + 12_345)
    sent = 0

    async def body() -> AsyncIterator[bytes]:
        nonlocal sent
        async for chunk in chunks_of(data, 7_777):
            sent += 1
            yield chunk

    key = new_key()
    info = await local.receive(key, len(data), body())

    assert sent > 250
    assert info.size == len(data)
    assert info.sha256 == hashlib.sha256(data).hexdigest()
    assert local.path_of(key).read_bytes() == data
    assert await local.stat(key) == info
    assert incoming(local) == []


async def test_a_body_in_tiny_chunks_is_stored_exactly(local: LocalStorage) -> None:
    """A slow client's body can come in pieces far smaller than a block: more of them than one
    vectored write takes (IOV_MAX, 1024 on Linux) must still be stored, in order."""
    data = os.urandom(WRITE_BLOCK + 5)

    key = new_key()
    info = await local.receive(key, len(data), chunks_of(data, 100))

    assert info.sha256 == hashlib.sha256(data).hexdigest()
    assert local.path_of(key).read_bytes() == data


async def test_receive_of_an_empty_chunk_stream_for_zero_bytes_stores_an_empty_object(
    local: LocalStorage,
) -> None:
    async def body() -> AsyncIterator[bytes]:
        yield b""

    key = new_key()
    info = await local.receive(key, 0, body())

    assert info.size == 0
    assert info.sha256 == hashlib.sha256(b"").hexdigest()


async def test_body_longer_than_declared_raises_body_too_large_and_keeps_nothing(
    local: LocalStorage,
) -> None:
    key = new_key()
    data = os.urandom(WRITE_BLOCK + 100)

    with pytest.raises(BodyTooLarge) as caught:
        await local.receive(key, len(data) - 1, chunks_of(data))

    assert caught.value.status == 413
    assert caught.value.code == "upload_too_large"
    assert await local.stat(key) is None
    assert incoming(local) == []
    assert files_under(local.root / "objects") == []


async def test_body_shorter_than_declared_raises_body_too_short_and_keeps_nothing(
    local: LocalStorage,
) -> None:
    key = new_key()
    data = os.urandom(WRITE_BLOCK + 100)

    with pytest.raises(BodyTooShort) as caught:
        await local.receive(key, len(data) + 1, chunks_of(data))

    assert caught.value.status == 400
    assert caught.value.code == "upload_too_short"
    assert await local.stat(key) is None
    assert incoming(local) == []
    assert files_under(local.root / "objects") == []


@pytest.mark.parametrize(("declared", "refused"), [(-1, BodyTooLarge), (+1, BodyTooShort)])
async def test_a_put_of_another_size_than_declared_keeps_nothing(
    local: LocalStorage, declared: int, refused: type[Exception]
) -> None:
    """Catches: a screenshot's file cut short or run long stored as if whole (put copies in
    a thread of its own, not through receive's checks)."""
    key = new_key()
    data = os.urandom(3 * 1024 * 1024 + 7)  # more than one block

    with pytest.raises(refused):
        await local.put(key, io.BytesIO(data), len(data) + declared, "image/png")

    assert await local.stat(key) is None
    assert incoming(local) == []
    assert files_under(local.root / "objects") == []


async def test_a_body_that_fails_midway_leaves_nothing(local: LocalStorage) -> None:
    class ClientGone(Exception):
        pass

    async def body() -> AsyncIterator[bytes]:
        for _ in range(3):
            yield os.urandom(WRITE_BLOCK // 2 + 1)
        raise ClientGone

    key = new_key()
    with pytest.raises(ClientGone):
        await local.receive(key, 10 * WRITE_BLOCK, body())

    assert await local.stat(key) is None
    assert incoming(local) == []
    assert files_under(local.root / "objects") == []


async def test_a_failed_receive_keeps_the_previous_complete_object(local: LocalStorage) -> None:
    key, first = new_key(), os.urandom(1000)
    await local.receive(key, len(first), chunks_of(first))

    with pytest.raises(BodyTooShort):
        await local.receive(key, len(first), chunks_of(first[:10]))

    assert local.path_of(key).read_bytes() == first
    info = await local.stat(key)
    assert info is not None
    assert info.sha256 == hashlib.sha256(first).hexdigest()
    assert incoming(local) == []


async def test_a_repeat_receive_replaces_the_bytes_and_the_sidecar_hash(
    local: LocalStorage,
) -> None:
    key, first, second = new_key(), os.urandom(5000), os.urandom(5000)
    await local.receive(key, len(first), chunks_of(first))

    info = await local.receive(key, len(second), chunks_of(second))

    digest = hashlib.sha256(second).hexdigest()
    sha512 = base64.b64encode(hashlib.sha512(second).digest()).decode()
    assert (info.sha256, info.sha512) == (digest, sha512)  # both hashed on the way in
    assert local.path_of(key).read_bytes() == second
    assert await local.stat(key) == info
    sidecar = local.path_of(key).with_name(local.path_of(key).name + ".sha256")
    fields = sidecar.read_text().split()
    assert (fields[0], fields[3]) == (digest, sha512)
    assert incoming(local) == []


async def test_a_sidecar_written_before_the_sha512_still_gives_the_sha256(
    local: LocalStorage,
) -> None:
    key, data = new_key(), os.urandom(5000)
    await local.receive(key, len(data), chunks_of(data))
    sidecar = local.path_of(key).with_name(local.path_of(key).name + ".sha256")
    sidecar.write_text(" ".join(sidecar.read_text().split()[:3]) + "\n")  # the old three fields

    info = await local.stat(key)

    assert info is not None
    assert (info.sha256, info.sha512) == (hashlib.sha256(data).hexdigest(), None)


@pytest.mark.parametrize(
    "key",
    ["../x", "a/../../x", "../../outside", "/etc/passwd", "/tmp/x", "", "/", ".", "a/.."],
)
async def test_a_key_that_leaves_the_object_tree_is_refused_everywhere(
    local: LocalStorage, local_root: Path, tmp_path: Path, key: str
) -> None:
    before = files_under(tmp_path)

    with pytest.raises(ObjectNotFound):
        await local.receive(key, 2, chunks_of(b"hi"))
    with pytest.raises(ObjectNotFound):
        await local.stat(key)
    with pytest.raises(ObjectNotFound):
        await local.compute_digests(key)
    with pytest.raises(ObjectNotFound):
        await local.delete(key)
    with pytest.raises(ObjectNotFound):
        await local.delete_prefix(key)

    assert files_under(tmp_path) == before
    assert files_under(local_root) == []


async def test_traversal_keys_cannot_read_or_remove_files_beside_the_objects(
    local: LocalStorage, local_root: Path, tmp_path: Path
) -> None:
    beside = local_root / "x"
    beside.write_bytes(b"not an object")
    outside = tmp_path / "outside"
    outside.write_bytes(b"not an object either")

    for key in ("../x", "a/../../x", "../../outside", str(outside)):
        with pytest.raises(ObjectNotFound):
            await local.delete(key)
        with pytest.raises(ObjectNotFound):
            await local.stat(key)

    assert beside.read_bytes() == b"not an object"
    assert outside.read_bytes() == b"not an object either"


async def test_a_key_with_harmless_dots_stays_inside_the_tree(local: LocalStorage) -> None:
    await local.receive("a/../b/c", 2, chunks_of(b"ok"))

    assert local.path_of("b/c").read_bytes() == b"ok"
    assert local.path_of("a/../b/c").is_relative_to(local.root / "objects")


async def test_stat_forgets_the_hash_when_the_object_was_replaced_by_hand(
    local: LocalStorage,
) -> None:
    key, data = new_key(), os.urandom(4096)
    await local.receive(key, len(data), chunks_of(data))
    path = local.path_of(key)
    other = os.urandom(4096)
    replacement = path.with_name("by-hand")
    replacement.write_bytes(other)
    replacement.replace(path)  # same size, a new inode

    info = await local.stat(key)

    assert info is not None
    assert info.size == len(other)
    assert info.sha256 is None
    assert (await local.compute_digests(key)).sha256 == hashlib.sha256(other).hexdigest()


async def test_stat_forgets_the_hash_when_the_object_was_truncated_by_hand(
    local: LocalStorage,
) -> None:
    key, data = new_key(), os.urandom(4096)
    await local.receive(key, len(data), chunks_of(data))
    with local.path_of(key).open("r+b") as f:
        f.truncate(100)

    info = await local.stat(key)

    assert info is not None
    assert info.size == 100
    assert info.sha256 is None


async def test_stat_without_a_sidecar_still_reports_the_size(local: LocalStorage) -> None:
    key, data = new_key(), b"abc"
    await local.receive(key, len(data), chunks_of(data))
    path = local.path_of(key)
    path.with_name(path.name + ".sha256").unlink()  # a crash between rename and sidecar

    info = await local.stat(key)

    assert info is not None
    assert info.size == 3
    assert info.sha256 is None


async def test_delete_removes_the_sidecar_too(local: LocalStorage) -> None:
    key = new_key()
    await local.receive(key, 3, chunks_of(b"abc"))

    await local.delete(key)

    assert files_under(local.root / "objects") == []


async def test_the_guard_excludes_a_second_holder_of_the_same_key_until_released(
    local: LocalStorage,
) -> None:
    order: list[str] = []
    first_inside = asyncio.Event()
    release_first = asyncio.Event()

    async def first() -> None:
        async with local.guard("p/a/b"):
            order.append("first in")
            first_inside.set()
            await release_first.wait()
            order.append("first out")

    async def second() -> None:
        async with local.guard("p/a/b"):
            order.append("second in")

    holder = asyncio.create_task(first())
    await first_inside.wait()
    waiter = asyncio.create_task(second())
    for _ in range(50):  # let the waiter try and fail many times
        await asyncio.sleep(0)
    assert order == ["first in"]
    release_first.set()
    await asyncio.wait_for(asyncio.gather(holder, waiter), timeout=10)
    assert order == ["first in", "first out", "second in"]


async def test_stored_keys_lists_a_sha256_file_left_without_its_object_and_delete_removes_it(
    local: LocalStorage, local_root: Path
) -> None:
    """A delete removes the .sha256 first, then the object; anything else that leaves one of
    the pair (a hand-made copy, a crash in a file system tool) still lists the key once."""
    whole, alone = new_key(), new_key()
    for key in (whole, alone):
        await local.receive(key, 4, chunks_of(b"data"))
    local.path_of(alone).unlink()  # the .sha256 stays

    pages = [page async for page in local.stored_keys(datetime.now(UTC) + timedelta(minutes=1))]

    assert sorted(key for page in pages for key in page) == sorted([whole, alone])
    await local.delete(alone)
    build_id = alone.rsplit("/", 1)[1]
    files = [p for p in (local_root / "objects").rglob("*") if build_id in p.name]
    assert files == []


async def test_a_put_cancelled_while_its_thread_copies_leaves_nothing(local: LocalStorage) -> None:
    """Catches: the temporary file of a put whose request went away (the thread it copies in
    runs on) left in incoming/ for the sweeper, an hour later."""
    reading, go_on = threading.Event(), threading.Event()

    class SlowFile(io.BytesIO):
        def read(self, size: int | None = -1) -> bytes:
            reading.set()
            go_on.wait(30)
            return super().read(size)

    key = new_key()
    put = asyncio.create_task(local.put(key, SlowFile(b"x" * 100), 100, "image/png"))
    await asyncio.to_thread(reading.wait, 30)
    put.cancel()
    with pytest.raises(asyncio.CancelledError):
        await put
    go_on.set()
    for _ in range(500):  # the thread finishes, then its file goes
        if not incoming(local):
            break
        await asyncio.sleep(0.01)
    assert incoming(local) == []
    assert await local.stat(key) is None

"""What a reading process may run in place of read_metadata in the tests: a parser gone wrong
(builds/readers.py imports these by name in each process, so this module imports little)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

from buildbay.builds.metadata import Reading, read_metadata

MiB = 1024 * 1024


def spin(open_file: Callable[[], IO[bytes]], file_name: str) -> Reading:
    while True:
        pass


def balloon(open_file: Callable[[], IO[bytes]], file_name: str) -> Reading:
    held = []
    while True:
        held.append(bytearray(16 * MiB))


def hang(open_file: Callable[[], IO[bytes]], file_name: str) -> Reading:
    time.sleep(3600)  # no processor time: only the wall clock stops it
    return Reading()


def crash(open_file: Callable[[], IO[bytes]], file_name: str) -> Reading:
    os.abort()


def read_size(open_file: Callable[[], IO[bytes]], file_name: str) -> Reading:
    """Reads the whole file through the pipe, a chunk at a time, and says how much it read."""
    total = 0
    with open_file() as file:
        while chunk := file.read(MiB):
            total += len(chunk)
    return Reading(metadata={"read": total, "pid": os.getpid()})


def hang_on_slow(open_file: Callable[[], IO[bytes]], file_name: str) -> Reading:
    """A file named slow.* never ends (only the wall clock stops it); the others are read."""
    if file_name.startswith("slow."):
        return hang(open_file, file_name)
    return read_metadata(open_file, file_name)


def wait_for_go(open_file: Callable[[], IO[bytes]], file_name: str) -> Reading:
    """A file whose bytes are `wait:<path>` is read once a file at <path> exists (a reading that
    takes as long as the test wants); the others are read as they should be."""
    with open_file() as file:
        head = file.read(4096)
    if not head.startswith(b"wait:"):
        return read_metadata(open_file, file_name)
    go = Path(head.removeprefix(b"wait:").decode())
    while not go.exists():
        time.sleep(0.01)
    return Reading()

"""The processes that read what build files say about themselves, where a hostile file can be
stopped.

A file's metadata is read (builds/metadata.py `read_metadata`) in a process of a small pool, never
in the server's own: a parse that runs away is stopped by the kernel or killed, and costs the
server's process neither its event loop (the interpreter's lock) nor a thread beyond the limit.

- Each process reads one file at a time under a limit of processor time per file (a profiling
  timer, SIGPROF, to the millisecond; RLIMIT_CPU, SIGXCPU, a second later as the kernel's
  backstop), of memory (RLIMIT_AS) and of wall-clock time, counted from the verify's call: at
  the limit the process is ended (by the kernel's signal, whose default action ends it even in
  the middle of C code, or SIGKILL from here) and a new one takes its place.
- The processes are `processes` at most: a verify waits for a free one without holding a thread
  (nor a database connection: builds/service.py gives it back while the file is checked).
- An account, and a project, reads in all processes but one at most: another tenant's file
  finds a process within one file's limit, however many the first sends.
- A process does not open the file: it asks this process for byte ranges of it over its pipe,
  so it holds only what the parser reads (a multi-GiB build is never loaded) and needs neither
  storage, the bucket's credentials nor a network. What it answers is JSON and bytes, never
  pickled objects, and bounded in size. (It is a limit of resources, not a sandbox: it runs as
  the server's user.)
- A process reads `tasks_per_process` files, then a fresh one takes over (1: a new process per
  file). Processes start from a fork server that has the parsers imported, and stay idle between
  files for any pool of the same server process (below).
"""

from __future__ import annotations

import asyncio
import functools
import io
import json
import math
import multiprocessing
import os
import resource
import signal
import struct
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import IO, Any

from buildbay.builds.metadata import Reading, has_parser, read_metadata, suffix_of
from buildbay.config import Settings
from buildbay.errors import ServiceUnavailable
from buildbay.storage.base import StorageUnavailable

CHUNK = 1024 * 1024  # bytes of the file sent to a reading process per request
MESSAGE_LIMIT = 16 * 1024 * 1024  # the largest answer taken from a reading process (an icon)
# What a reading process sends: a read (b"R", offset, length) or its answer (b"J" + JSON).
_READ = struct.Struct("<cQI")
_BUFFER = 64 * 1024  # the reading process's buffer over the pipe: zipfile reads small pieces

_CONTEXT = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"


@dataclass(frozen=True)
class ReadLimits:
    cpu_seconds: float  # processor time per file
    memory_bytes: int  # address space of a reading process (RLIMIT_AS)
    timeout_seconds: float  # wall-clock, from the verify's call: waiting for a process included


class MetadataReaders:
    """A pool of at most `processes` reading processes, started when first needed."""

    def __init__(
        self,
        processes: int,
        limits: ReadLimits,
        tasks_per_process: int = 100,
        *,
        read: Callable[[Callable[[], IO[bytes]], str], Reading] = read_metadata,
    ) -> None:
        """`read` is what each process runs on a file: `read_metadata`, or (tests) another
        module-level function, which the process imports by name."""
        self.processes = processes
        self.limits = limits
        self.tasks_per_process = tasks_per_process
        self._reader = read
        self._kind = (limits.memory_bytes, f"{read.__module__}.{read.__qualname__}")
        # A thread per file being read, `processes` at most: the slots. A verify waiting for one
        # waits in the executor's queue, holding nothing.
        self._threads = ThreadPoolExecutor(processes, thread_name_prefix="buildbay-reader")
        self.started = 0  # processes started so far (replacements included)
        # Each tenant's files being read or waiting, and the places it may hold: all processes
        # but one (all, with one process).
        self._tenants: dict[str, _Turn] = {}
        self._per_tenant = max(1, processes - 1)

    @classmethod
    def of(cls, settings: Settings) -> MetadataReaders:
        """The pool the settings describe (BUILDBAY_PARSE_*)."""
        limits = ReadLimits(
            cpu_seconds=settings.parse_cpu_seconds,
            memory_bytes=settings.parse_memory_mib * 1024 * 1024,
            timeout_seconds=settings.parse_timeout_seconds,
        )
        return cls(settings.parse_processes, limits, settings.parse_files_per_process)

    async def read(
        self, open_file: Callable[[], IO[bytes]], file_name: str, tenants: tuple[str, ...] = ()
    ) -> Reading:
        """What the file says, as `read_metadata` reads it, within the limits: past one, a
        Reading whose error says which.

        Each of `tenants` (the account that uploaded it, then its project: every caller names
        its kinds in the same order) reads in at most all processes but one at a time: their
        files wait for each other, so that another tenant's file always finds a process within
        one file's limit, however many files the first sends at once, from however many
        projects."""
        if not has_parser(file_name):
            return Reading()
        deadline = time.monotonic() + self.limits.timeout_seconds
        loop = asyncio.get_running_loop()
        turns = [self._turn_of(tenant) for tenant in dict.fromkeys(tenants)]
        held: list[_Turn] = []
        try:
            for turn in turns:  # in the order given: two reads never wait on each other
                await asyncio.wait_for(turn.places.acquire(), deadline - time.monotonic())
                held.append(turn)
        except TimeoutError:
            self._leave(turns, held)
            return Reading(error=f"Not a readable .{suffix_of(file_name)}: {self._took_too_long()}")
        except BaseException:
            self._leave(turns, held)
            raise
        reading = self._threads.submit(self._read, open_file, file_name, deadline)
        # The places are given back when the file is read, not when this verify stops waiting.
        reading.add_done_callback(lambda _: loop.call_soon_threadsafe(self._leave, turns, turns))
        return await asyncio.wrap_future(reading)

    def waiting(self, tenant: str) -> int:
        """The tenant's files being read or waiting for a process."""
        turn = self._tenants.get(tenant)
        return turn.users if turn is not None else 0

    def _turn_of(self, tenant: str) -> _Turn:
        turn = self._tenants.get(tenant)
        if turn is None:
            turn = self._tenants[tenant] = _Turn(tenant, asyncio.Semaphore(self._per_tenant))
        turn.users += 1
        return turn

    def _leave(self, turns: list[_Turn], held: list[_Turn]) -> None:
        for turn in held:
            turn.places.release()
        for turn in turns:
            turn.users -= 1
            if not turn.users:
                del self._tenants[turn.tenant]

    def _read(self, open_file: Callable[[], IO[bytes]], file_name: str, deadline: float) -> Reading:
        not_readable = f"Not a readable .{suffix_of(file_name)}: "
        if time.monotonic() >= deadline:  # waited for a process all this time
            return Reading(error=not_readable + self._took_too_long())
        with open_file() as file:
            process = self._take()
            try:
                outcome = process.read(file, file_name, self.limits, deadline)
            except BaseException:  # the storage failed under a read: this file's read is over
                process.kill()
                raise
        if isinstance(outcome, Reading):
            process.tasks += 1
            self._give_back(process)
            return outcome
        process.kill()  # its limit, or a broken pipe: a new process takes its place
        reasons = {
            "timeout": self._took_too_long(),
            "memory": f"reading it needed more than {self.limits.memory_bytes // 2**20} MiB of "
            "memory",
            "cpu": f"reading it took more than {_seconds(self.limits.cpu_seconds)} of processor "
            "time",
        }
        return Reading(error=not_readable + reasons.get(outcome, "its reader stopped"))

    def _took_too_long(self) -> str:
        return f"reading it took longer than {_seconds(self.limits.timeout_seconds)}"

    def _take(self) -> _Process:
        with _IDLE_LOCK:
            idle = _IDLE.get(self._kind)
            if idle:
                return idle.pop()
        try:
            process = _Process.start(self.limits.memory_bytes, self._reader)
        except OSError as exc:  # no process can be started (a limit of the system)
            raise ServiceUnavailable(
                f"Build files cannot be read right now ({exc.strerror}); try again"
            ) from None
        self.started += 1
        return process

    def _give_back(self, process: _Process) -> None:
        with _IDLE_LOCK:
            idle = _IDLE.setdefault(self._kind, [])
            if process.tasks < self.tasks_per_process and len(idle) < self.processes:
                idle.append(process)
                return
        process.stop()

    def close(self) -> None:
        """Wait for the files being read; their processes stay idle for the next pool of this
        server process. Blocking."""
        self._threads.shutdown(wait=True, cancel_futures=True)

    async def aclose(self) -> None:
        await asyncio.to_thread(self.close)


@dataclass
class _Turn:
    tenant: str
    places: asyncio.Semaphore
    users: int = 0  # the tenant's reads holding a place or waiting for one


# The reading processes waiting for a file, by the memory limit they were started with and what
# they run. They belong to the server process, as the fork server does, not to one app's pool: a
# process that makes several apps (the tests make hundreds) starts them once. Daemonic: they end
# with the server process (multiprocessing terminates them at exit; their pipe's end ends them).
_IDLE: dict[tuple[int, str], list[_Process]] = {}
_IDLE_LOCK = threading.Lock()


@dataclass
class _Process:
    """One reading process, and this side of its pipe."""

    process: Any  # multiprocessing's Process of the start method's context
    conn: Connection
    tasks: int = 0

    @classmethod
    def start(
        cls, memory_bytes: int, read: Callable[[Callable[[], IO[bytes]], str], Reading]
    ) -> _Process:
        context: Any = multiprocessing.get_context(_CONTEXT)
        if _CONTEXT == "forkserver":  # the parsers, imported once in the server processes fork from
            context.set_forkserver_preload([__name__])
        ours, theirs = context.Pipe(duplex=True)
        process = context.Process(
            target=_serve, args=(theirs, memory_bytes, read), name="buildbay-reader", daemon=True
        )
        try:
            process.start()
        finally:
            theirs.close()
        return cls(process, ours)

    def read(
        self, file: IO[bytes], file_name: str, limits: ReadLimits, deadline: float
    ) -> Reading | str:
        """The process's reading of `file`, serving its reads until it answers; or why it did not
        ("timeout", "memory", "cpu", "stopped")."""
        size = file.seek(0, io.SEEK_END)
        task = {"file": file_name, "size": size, "cpu": limits.cpu_seconds}
        try:
            self.conn.send_bytes(json.dumps(task).encode())
            while True:
                if not self.conn.poll(max(0.0, deadline - time.monotonic())):
                    return "timeout"
                message = self.conn.recv_bytes(MESSAGE_LIMIT)
                if message[:1] == b"R":  # a read: the bytes, at most a chunk
                    _, offset, length = _READ.unpack(message)
                    self.conn.send_bytes(_bytes_of(file, offset, min(length, CHUNK)))
                    continue
                answer = json.loads(message.removeprefix(b"J"))
                if "stopped" in answer:
                    return str(answer["stopped"])
                icon = None
                if answer.pop("icon"):
                    if not self.conn.poll(max(0.0, deadline - time.monotonic())):
                        return "timeout"
                    icon = self.conn.recv_bytes(MESSAGE_LIMIT)
                return _reading(answer, icon)
        except (EOFError, OSError, ValueError, KeyError, TypeError, struct.error):
            # The process is gone (killed by the kernel at its processor limit, or crashed), or
            # said something this side does not take.
            self.process.join(1)
            ended_by = self.process.exitcode
            return "cpu" if ended_by in (-signal.SIGPROF, -signal.SIGXCPU) else "stopped"

    def kill(self) -> None:
        self.conn.close()
        if self.process.is_alive():
            self.process.kill()
        self.process.join()
        self.process.close()

    def stop(self) -> None:
        self.conn.close()  # the process's next read ends: it exits
        self.process.join(5)
        if self.process.exitcode is None:
            self.process.kill()
            self.process.join()
        self.process.close()


def _bytes_of(file: IO[bytes], offset: int, length: int) -> bytes:
    try:
        file.seek(offset)
        return file.read(length)
    except OSError as exc:  # the storage's failure, not the file's: verify can be tried again
        raise StorageUnavailable(
            "The build's bytes cannot be read from storage right now; try verify again"
        ) from exc


def _seconds(value: float) -> str:
    return f"{value:g} second" + ("" if value == 1 else "s")


def _reading(answer: dict[str, Any], icon: bytes | None) -> Reading:
    metadata, error, refused, platform = (
        answer["metadata"],
        answer["error"],
        answer["refused"],
        answer["platform"],
    )
    if not (metadata is None or isinstance(metadata, dict)):
        raise ValueError("metadata")
    for text in (error, refused, platform):
        if not (text is None or isinstance(text, str)):
            raise ValueError("text")
    udids = answer["profileUdids"]
    if not (isinstance(udids, list) and all(isinstance(u, str) for u in udids)):
        raise ValueError("profileUdids")
    return Reading(metadata, icon, error, refused, platform, tuple(udids))


# -- the reading process ------------------------------------------------------------------------


def _serve(
    conn: Connection, memory_bytes: int, read: Callable[[Callable[[], IO[bytes]], str], Reading]
) -> None:
    """A reading process's life: read the files it is given, one at a time, until its pipe
    closes. At its limit of memory it says so and exits; at its limit of processor time the
    kernel ends it (SIGPROF, SIGXCPU: their default action, no handler is installed)."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a process ended at a limit leaves no core
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    while True:
        try:
            task = json.loads(conn.recv_bytes())
        except EOFError:
            return
        # This file gets `cpu` seconds of processor time from now. RLIMIT_CPU counts whole
        # seconds over the process's life: the timer is the limit, it is the backstop.
        cpu = float(task["cpu"])
        signal.setitimer(signal.ITIMER_PROF, cpu)
        used = resource.getrusage(resource.RUSAGE_SELF)
        soft = math.ceil(used.ru_utime + used.ru_stime + cpu) + 1
        if hard != resource.RLIM_INFINITY:
            soft = min(soft, hard)
        resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))
        try:
            reading = read(
                functools.partial(_PipeFile.buffered, conn, int(task["size"])), str(task["file"])
            )
            answer = {
                "metadata": reading.metadata,
                "error": reading.error,
                "refused": reading.refused,
                "platform": reading.platform,
                "profileUdids": reading.profile_udids,
                "icon": reading.icon_png is not None,
            }
            conn.send_bytes(b"J" + json.dumps(answer).encode())
            if reading.icon_png is not None:
                conn.send_bytes(reading.icon_png)
        except MemoryError:
            _exit_saying(conn, "memory")
        except (EOFError, OSError):
            return  # the server gave up on this file (or stopped): it kills or replaces us
        signal.setitimer(signal.ITIMER_PROF, 0)
        resource.setrlimit(resource.RLIMIT_CPU, (hard, hard))


def _exit_saying(conn: Connection, reason: str) -> None:
    try:
        conn.send_bytes(b"J" + json.dumps({"stopped": reason}).encode())
    finally:
        os._exit(1)


class _PipeFile(io.RawIOBase):
    """The file being read, as a seekable file whose reads ask the server for the bytes."""

    def __init__(self, conn: Connection, size: int) -> None:
        super().__init__()
        self._conn = conn
        self._size = size
        self._position = 0

    @classmethod
    def buffered(cls, conn: Connection, size: int) -> IO[bytes]:
        return io.BufferedReader(cls(conn, size), _BUFFER)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self._size}[whence]
        if base + offset < 0:
            raise OSError("seek before the start of the file")
        self._position = base + offset
        return self._position

    def readinto(self, buffer: Any) -> int:
        length = min(len(buffer), CHUNK, self._size - self._position)
        if length <= 0:
            return 0
        self._conn.send_bytes(_READ.pack(b"R", self._position, length))
        data = self._conn.recv_bytes(CHUNK)
        buffer[: len(data)] = data
        self._position += len(data)
        return len(data)

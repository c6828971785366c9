"""The pace at which a server process reads feedback bodies: at most BYTES_PER_SECOND after a
first BURST, the oldest feedback with bytes in hand first.

Why: the event loop that parses a feedback's body (~2.5 ms of its CPU a MiB, all told) answers
every other request too. Twenty feedback of 6 MiB arriving at once took ~300 ms of it within
half a second, and at a load where the loop was 85-90% busy the reads queued behind that for a
second (bench/feedback.py, docs/performance.md). Read at BYTES_PER_SECOND, the same bodies take
~4% of the loop for as long as they last. Little is lost by the wait when many send: a POST waits
for its screenshots' re-encoding, which takes the workers longer a MiB than this pace
(feedback/images.py); a body not read waits in the sender's socket (TCP's flow control), not in
this process.

Oldest first, so that bodies are finished one after another for the workers, not all late
together (a fair share of the pace among twenty would finish the first after ~7 s, the workers
idle meanwhile). Only a feedback whose next bytes have arrived waits for its turn: one that
sends slowly holds no turn while it sends, so that it cannot hold back the others'. And age is
not banked: a feedback whose next bytes came STALL_SECONDS or more after its last is as old as
that moment (a client that trickled a byte at a time for minutes, then sent at full speed,
would otherwise come before every feedback begun meanwhile). The first FREE_BYTES of a body
never wait: a feedback without screenshots (its fields are at most ~100 KiB) costs the loop
next to nothing, and is not held behind others' screenshots.

What it costs: a lone feedback of more than BURST, from a client faster than the pace, takes up
to (60 - 8) / 16 = 3.3 s longer to be read (its re-encoding starts once it is whole); one that
arrives while others' bodies are being read waits for those begun before it.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
import weakref

MiB = 1024 * 1024
BYTES_PER_SECOND = 16 * MiB
BURST = 8 * MiB  # read at once before the pace applies: a lone feedback is not slowed
STALL_SECONDS = 1.0  # between a feedback's chunks, after which it is as old as its next one
FREE_BYTES = 128 * 1024  # of each body, read without waiting


class Intake:
    """One event loop's pace (`intake()`): a feedback's body `Body.take`s before it consumes
    each chunk."""

    def __init__(self, bytes_per_second: float = BYTES_PER_SECOND, burst: float = BURST) -> None:
        self._rate, self._burst = bytes_per_second, burst
        self._allowance = burst
        self._at = time.monotonic()
        self._held = False
        # Feedback waiting for their turn: (when they began, the order they asked in, the turn).
        self._waiting: list[tuple[float, int, asyncio.Future[None]]] = []
        self._order = itertools.count()

    def body(self) -> Body:
        """A feedback's body about to be read."""
        return Body(self)

    def spend(self, size: int) -> None:
        """`size` bytes read without waiting: those after them wait the longer."""
        self._refill()
        self._allowance -= size

    def _refill(self) -> None:
        now = time.monotonic()
        self._allowance = min(self._burst, self._allowance + (now - self._at) * self._rate)
        self._at = now

    async def take(self, began: float, size: int) -> None:
        """Wait for the turn of the feedback that began at `began` (time.monotonic) among those
        waiting, and for `size` bytes of the pace."""
        if self._held or self._waiting:
            turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            entry = (began, next(self._order), turn)
            heapq.heappush(self._waiting, entry)
            try:
                await turn
            except asyncio.CancelledError:
                if turn.done() and not turn.cancelled():
                    self._pass_on()  # given the turn as it was cancelled: the next one's
                elif entry in self._waiting:
                    self._waiting.remove(entry)
                    heapq.heapify(self._waiting)
                raise
        self._held = True
        try:
            self.spend(size)
            if self._allowance < 0:
                await asyncio.sleep(-self._allowance / self._rate)
        finally:
            # Passed on once the caller has had the moment to ask again: a feedback whose next
            # chunk is in hand keeps its turn while it is the oldest waiting.
            asyncio.get_running_loop().call_soon(self._pass_on)

    def _pass_on(self) -> None:
        self._held = False
        while self._waiting:
            _, _, turn = heapq.heappop(self._waiting)
            if not turn.done():  # not one cancelled meanwhile
                self._held = True
                turn.set_result(None)
                return


class Body:
    """One feedback's body as it is read: `take` each chunk before consuming it."""

    def __init__(self, intake: Intake) -> None:
        self._intake = intake
        self._began = self._last = time.monotonic()
        self._read = 0

    async def take(self, size: int) -> None:
        now = time.monotonic()
        if now - self._last >= STALL_SECONDS:
            self._began = now  # stalled: no older than this chunk
        self._read += size
        if self._read <= FREE_BYTES:
            self._intake.spend(size)
        else:
            await self._intake.take(self._began, size)
        self._last = time.monotonic()


_INTAKES: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Intake] = weakref.WeakKeyDictionary()


def intake() -> Intake:
    """The running event loop's (a server process has one; the tests make many)."""
    loop = asyncio.get_running_loop()
    found = _INTAKES.get(loop)
    if found is None:
        found = _INTAKES[loop] = Intake()
    return found

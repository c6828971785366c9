"""The pace of reading feedback bodies (feedback/intake.py): bodies read at most at its rate
after its burst, the oldest waiting feedback first, a slow sender holding no one back, and a
feedback gone (its request cancelled) leaving the turn to the next."""

from __future__ import annotations

import asyncio
import io
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from PIL import Image

from buildbay.feedback import intake as intake_module
from buildbay.feedback import submission
from buildbay.feedback.intake import FREE_BYTES, STALL_SECONDS, Intake
from tests.feedback.submitting import form_parts, screenshots

RATE = 20_000.0  # bytes a second: a 1,000-byte chunk is 50 ms of the pace


async def _read(intake: Intake, began: float, chunks: int, done: list[str], name: str) -> None:
    for _ in range(chunks):
        await intake.take(began, 1_000)
        done.append(name)


async def test_the_oldest_waiting_feedback_reads_first_whatever_asked_first() -> None:
    """Catches: a fair share (every body late together, the workers idle meanwhile) or the
    order the chunks asked in, in place of the order the feedback began in."""
    intake, done = Intake(RATE, burst=0), []
    newer = asyncio.create_task(_read(intake, 2.0, 2, done, "newer"))
    await asyncio.sleep(0)  # the newer holds the turn, sleeping for its first chunk
    newest = asyncio.create_task(_read(intake, 3.0, 2, done, "newest"))
    oldest = asyncio.create_task(_read(intake, 1.0, 2, done, "oldest"))
    await asyncio.gather(newer, newest, oldest)
    assert done[1:5] == ["oldest", "oldest", "newer", "newest"]


async def test_bodies_are_read_no_faster_than_the_pace_after_the_burst() -> None:
    intake = Intake(RATE, burst=5_000)
    started = time.monotonic()
    await asyncio.gather(*(_read(intake, n, 5, [], "") for n in range(3)))  # 15,000 bytes
    # 5,000 at once, the other 10,000 at 20,000 a second: at least half a second (no upper
    # bound: a loaded machine only makes it later).
    assert time.monotonic() - started >= 0.95 * 10_000 / RATE


async def test_a_feedback_whose_bytes_have_not_arrived_holds_no_one_back() -> None:
    """Catches: a turn held while waiting for a sender's next bytes (a slow or stalled sender
    would hold every other feedback's body)."""
    intake, done = Intake(RATE, burst=0), []
    more = asyncio.Event()

    async def stalled() -> None:
        await intake.take(0.0, 1_000)  # the oldest, its first chunk in hand
        await more.wait()  # then nothing arrives for a while
        await intake.take(0.0, 1_000)
        done.append("stalled")

    slow = asyncio.create_task(stalled())
    # Read whole while the oldest waits for its bytes.
    await asyncio.wait_for(_read(intake, 1.0, 3, done, "newer"), timeout=10)
    assert done == ["newer"] * 3
    more.set()
    await slow
    assert done[-1] == "stalled"


async def test_a_cancelled_feedback_leaves_its_turn_to_the_next() -> None:
    """Catches: a turn lost with a request that went away (as it waited, or as it held it):
    every later feedback would wait for good."""
    intake, done = Intake(RATE, burst=0), []
    holder = asyncio.create_task(_read(intake, 1.0, 1, done, "holder"))
    await asyncio.sleep(0)
    waiting = asyncio.create_task(_read(intake, 2.0, 1, done, "waiting"))
    last = asyncio.create_task(_read(intake, 3.0, 1, done, "last"))
    await asyncio.sleep(0)
    waiting.cancel()
    holder.cancel()  # mid-sleep, holding the turn
    await asyncio.wait_for(last, timeout=10)
    assert done == ["last"]
    assert waiting.cancelled()
    assert holder.cancelled()


async def test_a_feedback_s_body_is_read_at_the_pace(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Across read_submission: its body goes through the process's intake, chunk by chunk,
    its first FREE_BYTES without waiting."""
    paced = Intake(400_000.0, burst=0)
    monkeypatch.setattr(submission, "intake", lambda: paced)
    noise = Image.frombytes("RGB", (300, 300), os.urandom(300 * 300 * 3))  # ~270 KB as a PNG
    out = io.BytesIO()
    noise.save(out, "PNG")
    files = screenshots(out.getvalue())
    request = httpx.Request("POST", "http://x/", files=form_parts({"text": "It crashed"}, files))
    body = request.read()

    async def chunks() -> AsyncIterator[bytes]:
        for start in range(0, len(body), 4096):
            yield body[start : start + 4096]

    started = time.monotonic()
    read = await submission.read_submission(request.headers["content-type"], chunks(), tmp_path)
    read.close()
    assert read.text == "It crashed"
    assert time.monotonic() - started >= 0.95 * (len(body) - FREE_BYTES) / 400_000.0


async def test_a_feedback_without_screenshots_is_not_held_behind_others_screenshots() -> None:
    """Catches: a text-only feedback (a few KiB, nothing to the loop) waiting seconds for the
    bodies begun before it."""
    intake, done = Intake(RATE, burst=0), []
    big = [asyncio.create_task(_read(intake, n, 20, done, "big")) for n in range(3)]
    await asyncio.sleep(0)
    small = intake.body()
    await asyncio.wait_for(small.take(4_000), timeout=0.5)  # a second of the pace, at once
    assert done.count("big") < 3
    for task in big:
        task.cancel()
    await asyncio.gather(*big, return_exceptions=True)


async def test_a_sender_that_stalled_is_as_old_as_its_next_bytes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Catches: age banked by a client that began long ago and sent next to nothing (a byte
    now and then), then sends at full speed: it would come before every feedback begun
    meanwhile."""
    monkeypatch.setattr(intake_module, "FREE_BYTES", 0)  # every byte through the turns
    intake, done = Intake(RATE, burst=0), []
    banked = intake.body()
    await banked.take(1)  # begun, then nothing for a while
    await asyncio.sleep(STALL_SECONDS + 0.1)
    newer = asyncio.create_task(_read(intake, time.monotonic(), 2, done, "newer"))
    await asyncio.sleep(0)  # the newer holds the turn

    async def banked_reads() -> None:
        for _ in range(2):
            await banked.take(1_000)
            done.append("banked")

    await asyncio.gather(newer, banked_reads())
    assert done == ["newer", "newer", "banked", "banked"]


async def test_a_feedback_cancelled_as_it_is_given_the_turn_passes_it_on() -> None:
    """Catches: the turn handed to a request in the very moment it is cancelled (before it
    runs again), kept by no one for good."""
    intake, done = Intake(RATE, burst=0), []
    holder = asyncio.create_task(_read(intake, 1.0, 1, done, "holder"))
    await asyncio.sleep(0)
    given = asyncio.create_task(_read(intake, 2.0, 1, done, "given"))
    last = asyncio.create_task(_read(intake, 3.0, 1, done, "last"))
    await holder  # its turn is handed to the next as this task wakes
    given.cancel()
    await asyncio.wait_for(last, timeout=10)
    assert done == ["holder", "last"]
    assert given.cancelled()

"""Issue 38's bad input: each refused with the field named (422), a body over 60 MiB refused
before it is read (413), a file that is not an image found out by decoding it, and a
decompression bomb refused from its header, without the memory its pixels would take."""

from __future__ import annotations

import io
import json
import os
import struct
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from PIL import Image

from buildbay.config import Settings
from buildbay.feedback.dependencies import spool_dir
from buildbay.feedback.submission import MAX_BODY, MAX_SCREENSHOT_BYTES
from tests.conftest import BASE_URL, TEST_SECRET, Account, Api, assert_problem
from tests.feedback.submitting import (
    World,
    form_parts,
    jpeg_scan_bomb,
    make_world,
    opened,
    png,
    png_bomb,
    png_chunk,
    screenshots,
)

pytestmark = pytest.mark.usefixtures("no_leaks")
MiB = 1024 * 1024
SHOTS, UNREADABLE = "screenshots", "unreadable_screenshot"


@pytest.fixture
async def world(api: Api, client: httpx.AsyncClient, app: FastAPI, owner: Account) -> World:
    return await make_world(api, client, app, owner)


def refused(r: httpx.Response, field: str, code: str = "validation_error") -> str:
    """The problem names `field` (in its errors) and says what is wrong in words."""
    problem = assert_problem(r, 422, code)
    [error] = [e for e in problem["errors"] if e["field"] == field]
    assert field in problem["detail"]
    message: str = error["message"]
    return message


async def nothing_stored(world: World) -> None:
    """No screenshot was kept, and no feedback made."""
    async for keys in world.ctx.storage.stored_keys(modified_before=_far_future()):
        assert not [k for k in keys if k.startswith("feedback/")]


def _far_future() -> Any:
    from datetime import UTC, datetime

    return datetime(2100, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "cannot be empty"),
        (" \n\t ", "cannot be empty"),
        ("x" * 20_001, "longer than 20,000 characters"),
        (" " + "é" * 20_001, "longer than 20,000 characters"),
        (None, "is required"),
        ("nul \x00 inside", "NUL"),
    ],
)
async def test_text_must_say_something_and_not_too_much(
    world: World, text: str | None, why: str
) -> None:
    assert why in refused(await world.send(world.tester, {"text": text}), "text")


async def test_text_of_exactly_20000_characters_after_trimming_is_taken(world: World) -> None:
    r = await world.send(world.tester, {"text": "\n " + "ü" * 20_000 + " \n"})
    assert r.status_code == 201, r.text
    assert r.json()["text"] == "ü" * 20_000


@pytest.mark.parametrize("category", ["feature", "BUG", "", None])
async def test_category_is_one_of_four(world: World, category: str | None) -> None:
    message = refused(await world.send(world.tester, {"category": category}), "category")
    assert "bug, crash, suggestion, other" in message


@pytest.mark.parametrize(
    ("context", "why"),
    [
        ('["a list"]', "must be a JSON object"),
        ('"a string"', "must be a JSON object"),
        ("{not json", "is not JSON"),
        ('{"free": "' + "x" * (16 * 1024) + '"}', "larger than 16 KiB"),
        ("[" * 9000 + "]" * 9000, "larger than 16 KiB"),
        ("[[1]]", "must be a JSON object"),
        ("[" * 4000 + "]" * 4000, "nests too deeply"),
        ("{" + '"a":{' * 2700 + "}" * 2701, "nests too deeply"),
        # Deep enough for a stack of readers (the answer, the webhook event), not for json's.
        ('{"a":' * 300 + "1" + "}" * 300, "nests too deeply"),
        ('{"a":' + "[" * 32 + "]" * 32 + "}", "at most 32 levels"),
        # Python's decoder takes these; neither PostgreSQL nor any JSON reader takes them back.
        ('{"battery": NaN}', "holds NaN, which is not a JSON number"),
        ('{"a": [-Infinity]}', "holds -Infinity, which is not a JSON number"),
        ('{"free": 1e400}', "holds a number too large to keep (1e400)"),
    ],
)
async def test_context_is_a_json_object_of_at_most_16_kib(
    world: World, context: str, why: str
) -> None:
    assert why in refused(await world.send(world.tester, {"context": context}), "context")


async def test_a_context_of_exactly_16_kib_is_taken(world: World) -> None:
    filler = "x" * (16 * 1024 - len('{"free": ""}'))
    context = '{"free": "' + filler + '"}'
    assert len(context.encode()) == 16 * 1024
    r = await world.send(world.tester, {"context": context})
    assert r.status_code == 201, r.text
    assert r.json()["context"] == {"free": filler}


async def test_a_context_32_levels_deep_with_every_kind_of_number_is_taken(world: World) -> None:
    context = {"deep": json.loads("[" * 30 + "]" * 30), "n": [10**30, -0.5, 1e-400, 1.5e300]}
    r = await world.send(world.tester, {"context": json.dumps(context)})
    assert r.status_code == 201, r.text
    assert r.json()["context"] == context
    inbox = f"/api/projects/{world.project['id']}/feedback"
    r = await world.client.get(inbox, headers=world.owner.headers)
    assert r.json()["feedback"][0]["context"] == context


async def test_a_field_the_form_does_not_have_or_sent_twice_is_refused(world: World) -> None:
    r = await world.client.post(
        world.feedback_url(),
        files=[*form_parts(), ("status", (None, b"resolved"))],
        headers=world.tester.headers,
    )
    assert "is not a field of feedback" in refused(r, "status")
    r = await world.client.post(
        world.feedback_url(),
        files=[*form_parts(), ("text", (None, b"again"))],
        headers=world.tester.headers,
    )
    assert "sent twice" in refused(r, "text")


async def test_a_file_that_is_not_an_image_is_refused_whatever_its_name(world: World) -> None:
    fake = b"\x89PNG\r\n\x1a\n but then not a PNG at all"
    files = [*screenshots(png()), *screenshots(fake, name="screen.png", kind="image/png")]
    message = refused(await world.send(world.tester, files=files), SHOTS, UNREADABLE)
    assert message == "screenshot 2 is not a PNG, JPEG or HEIC image"
    await nothing_stored(world)


@pytest.mark.parametrize("kind", ["GIF", "BMP", "WEBP", "TIFF"])
async def test_an_image_of_another_format_is_refused(world: World, kind: str) -> None:
    import io

    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (8, 8)).save(out, kind)
    files = screenshots(out.getvalue(), name="shot.png", kind="image/png")
    message = refused(await world.send(world.tester, files=files), SHOTS, UNREADABLE)
    assert "is not a PNG, JPEG or HEIC image" in message


async def test_a_truncated_image_is_refused(world: World) -> None:
    import io

    from PIL import Image

    noise = Image.frombytes("RGB", (256, 256), os.urandom(256 * 256 * 3))
    out = io.BytesIO()
    noise.save(out, "JPEG", quality=95)  # the pixels are most of the file
    whole = out.getvalue()
    files = screenshots(whole[: len(whole) * 2 // 3], name="cut.jpg", kind="image/jpeg")
    message = refused(await world.send(world.tester, files=files), SHOTS, UNREADABLE)
    assert message == "screenshot 1 is not a whole image: it does not decode"


async def test_a_sixth_screenshot_is_refused(world: World) -> None:
    five = screenshots(*[png((4 + i, 4)) for i in range(5)])
    r = await world.send(world.tester, files=five)
    assert r.status_code == 201, r.text
    assert len(r.json()["screenshots"]) == 5

    r = await world.send(world.tester, files=[*five, *screenshots(png())])
    assert refused(r, "screenshots") == "at most 5 screenshots a feedback"


async def test_no_screenshot_s_file_outlives_its_request_stored_or_refused(world: World) -> None:
    """The screenshots wait in files by name (feedback/images.py `spool_file`), as they arrived
    and as re-encoded. Catches: a file left in the spool by any way a feedback ends, which
    only the sweeper would take, an hour later."""
    spool = spool_dir(world.ctx)
    cases = [
        (screenshots(png(), png((5, 5))), {}, 201),  # stored
        (screenshots(png(), b"\x89PNG\r\n\x1a\n not one"), {}, 422),  # does not decode
        (screenshots(*[png()] * 6), {}, 422),  # refused part way through the body
        (screenshots(png()), {"category": "none of them"}, 422),  # a field refused at the end
    ]
    for files, fields, status in cases:
        r = await world.send(world.tester, fields, files=files)
        assert r.status_code == status, r.text
        assert list(spool.iterdir()) == []


async def test_an_empty_file_part_is_no_screenshot(world: World) -> None:
    """What a browser sends for a file input left empty: taken as no screenshot."""
    empty = [("screenshots", ("", b"", "application/octet-stream"))]
    r = await world.send(world.tester, files=[*empty, *screenshots(png((3, 3))), *empty])
    assert r.status_code == 201, r.text
    assert [(s["width"], s["height"]) for s in r.json()["screenshots"]] == [(3, 3)]


@pytest.mark.parametrize(
    ("context", "kept"),
    [
        ('{"a": "x\\u0000y"}', {"a": "x\ufffdy"}),
        ('{"\\u0000": 1}', {"\ufffd": 1}),
        ('{"a": ["\\ud800", "\\ud83d\\ude00"]}', {"a": ["\ufffd", "\U0001f600"]}),
        ('{"\\udfff": 1}', {"\ufffd": 1}),
    ],
)
async def test_a_context_s_nul_or_half_a_surrogate_pair_is_kept_as_a_replacement_character(
    world: World, context: str, kept: dict[str, object]
) -> None:
    """Neither is text UTF-8 or PostgreSQL keeps; the report is taken, the character shown as
    a browser shows it (a whole surrogate pair is one character, kept)."""
    r = await world.send(world.tester, {"context": context})
    assert r.status_code == 201, r.text
    assert r.json()["context"] == kept


async def test_a_screenshot_over_10_mib_is_refused_as_it_arrives(world: World) -> None:
    pulled = 0

    async def body() -> AsyncIterator[bytes]:
        nonlocal pulled
        boundary = b"limit"
        head = (
            b'--limit\r\nContent-Disposition: form-data; name="text"\r\n\r\nBig\r\n'
            b'--limit\r\nContent-Disposition: form-data; name="category"\r\n\r\nbug\r\n'
            b'--limit\r\nContent-Disposition: form-data; name="screenshots"; '
            b'filename="big.png"\r\nContent-Type: image/png\r\n\r\n'
        )
        yield head
        pulled += len(head)
        chunk = b"\0" * (256 * 1024)
        for _ in range(MAX_SCREENSHOT_BYTES * 3 // len(chunk)):  # 30 MiB, if it were all read
            pulled += len(chunk)
            yield chunk
        yield b"\r\n--" + boundary + b"--\r\n"

    r = await world.client.post(
        world.feedback_url(),
        content=body(),
        headers={**world.tester.headers, "Content-Type": "multipart/form-data; boundary=limit"},
    )

    assert refused(r, "screenshots") == "screenshot 1 is larger than 10 MiB"
    assert pulled <= MAX_SCREENSHOT_BYTES + 2 * 256 * 1024  # stopped at the limit
    assert r.headers["connection"] == "close"


@pytest.mark.parametrize("declared", [True, False])
async def test_a_body_over_60_mib_is_refused_before_it_is_read(
    world: World, declared: bool
) -> None:
    """A good form, then 61 MiB after its closing boundary (an epilogue, which a parser skips):
    only the body's own limit stops it."""
    size = 61 * MiB
    form = (
        b'--b\r\nContent-Disposition: form-data; name="text"\r\n\r\nhi\r\n'
        b'--b\r\nContent-Disposition: form-data; name="category"\r\n\r\nbug\r\n--b--\r\n'
    )
    chunk = b"-" * MiB
    pulled = 0

    async def body() -> AsyncIterator[bytes]:
        nonlocal pulled
        pulled += len(form)
        yield form
        for _ in range((size - len(form)) // len(chunk)):
            pulled += len(chunk)
            yield chunk
        rest = (size - len(form)) % len(chunk)
        pulled += rest
        yield chunk[:rest]

    headers = {**world.tester.headers, "Content-Type": "multipart/form-data; boundary=b"}
    if declared:
        headers["Content-Length"] = str(size)
    r = await world.client.post(world.feedback_url(), content=body(), headers=headers)

    problem = assert_problem(r, 413, "body_too_large")
    assert "60 MiB" in problem["detail"]
    assert r.headers["connection"] == "close"
    if declared:
        assert pulled == 0  # refused on its Content-Length alone
    else:  # read as it came, and stopped at the limit
        assert MAX_BODY - len(chunk) < pulled <= MAX_BODY + len(chunk)
    await nothing_stored(world)


@pytest.mark.parametrize(
    ("content_type", "code"),
    [
        ("application/json", "unsupported_content_type"),
        ("application/x-www-form-urlencoded", "unsupported_content_type"),
        ("multipart/form-data", "unsupported_content_type"),  # no boundary
    ],
)
async def test_a_body_that_is_not_a_multipart_form_is_400(
    world: World, content_type: str, code: str
) -> None:
    r = await world.client.post(
        world.feedback_url(),
        content=b'{"text": "hi", "category": "bug"}',
        headers={**world.tester.headers, "Content-Type": content_type},
    )
    assert_problem(r, 400, code)


async def test_a_malformed_multipart_body_is_400(world: World) -> None:
    for body in (
        b"no boundary anywhere",
        b'--b\r\nContent-Disposition: form-data; name="text"\r\n\r\nunfinished',
        b"--b\r\nX: " + b"y" * 10_000 + b"\r\n\r\n",
        b"--b\r\nContent-Disposition: form-data\r\n\r\nno name\r\n--b--\r\n",
    ):
        r = await world.client.post(
            world.feedback_url(),
            content=body,
            headers={**world.tester.headers, "Content-Type": "multipart/form-data; boundary=b"},
        )
        assert_problem(r, 400, "malformed_multipart")


async def test_the_refusals_come_before_the_body_is_read_for_who_may_not_send(
    world: World,
) -> None:
    pulled = 0

    async def body() -> AsyncIterator[bytes]:
        nonlocal pulled
        for _ in range(10):
            pulled += MiB
            yield b"x" * MiB

    r = await world.client.post(
        world.feedback_url(),
        content=body(),
        headers={**world.stranger.headers, "Content-Type": "multipart/form-data; boundary=b"},
    )
    assert_problem(r, 403, "not_a_member")
    assert pulled == 0


async def test_a_50000_by_50000_png_bomb_is_refused_from_its_header(world: World) -> None:
    bomb = png_bomb()
    assert len(bomb) < 200 * 1024  # a small file: the pixels are only claimed
    message = refused(await world.send(world.tester, files=screenshots(bomb)), SHOTS, UNREADABLE)
    assert message == "screenshot 1 has more than 40 million pixels"
    # Just past the limit: refused too; a large screenshot within it is taken.
    over = png_bomb(8000, 5001, rows=5001)
    message = refused(await world.send(world.tester, files=screenshots(over)), SHOTS, UNREADABLE)
    assert message == "screenshot 1 has more than 40 million pixels"
    within = png_bomb(6000, 6000, rows=6000)  # 36 million grey pixels, every row there
    r = await world.send(world.tester, files=screenshots(within))
    assert r.status_code == 201, r.text
    assert (r.json()["screenshots"][0]["width"], r.json()["screenshots"][0]["height"]) == (
        6000,
        6000,
    )


async def test_a_png_whose_exif_is_not_exif_is_taken_as_its_pixels(world: World) -> None:
    shot = io.BytesIO()
    Image.new("RGB", (40, 30), (0, 90, 200)).save(shot, "PNG", exif=bytes(range(256)))
    r = await world.send(world.tester, files=screenshots(shot.getvalue()))
    assert r.status_code == 201, r.text
    [stored] = r.json()["screenshots"]
    assert (stored["width"], stored["height"]) == (40, 30)


async def test_a_jpeg_of_more_than_100_scans_is_refused_before_it_is_decoded(
    world: World,
) -> None:
    """Each scan of a progressive JPEG is a pass over the whole image and can take a dozen
    bytes: 10 MiB of them on 40 megapixels would keep an image worker busy for hours."""
    progressive = io.BytesIO()
    Image.new("RGB", (640, 480), (200, 30, 30)).save(progressive, "JPEG", progressive=True)
    within = jpeg_scan_bomb(640, 480, 99)  # with its DC scan: 100
    assert opened(within).size == (640, 480)  # a JPEG Pillow decodes, warnings and all
    r = await world.send(world.tester, files=screenshots(progressive.getvalue(), within))
    assert r.status_code == 201, r.text

    for bomb in (
        jpeg_scan_bomb(640, 480, 100),
        jpeg_scan_bomb(640, 480, 200, between=b"\x00garbage\xff\x00"),  # skipped by libjpeg
    ):
        message = refused(
            await world.send(world.tester, files=screenshots(bomb)), SHOTS, UNREADABLE
        )
        assert message == ("screenshot 1 has more than 100 scans: it would take too long to decode")
    padded = jpeg_scan_bomb(64, 64, 1, comments=10_000)
    message = refused(
        await world.send(world.tester, files=screenshots(png(), padded)), SHOTS, UNREADABLE
    )
    assert message == "screenshot 2 has more than 10,000 segments: it is not a JPEG to decode"


async def test_a_png_of_more_than_20000_chunks_is_refused_before_pillow_reads_them(
    world: World,
) -> None:
    """Pillow reads a PNG's chunks one at a time in Python: 800,000 empty ones (10 MiB) held
    an image worker, and the interpreter, for seconds."""
    shot = png((64, 48))
    idat = shot.index(b"IDAT") - 4
    pixels = shot[idat + 8 : idat + 8 + struct.unpack(">I", shot[idat : idat + 4])[0]]

    def split(pieces: int, empty: int) -> bytes:
        """The same image, its pixels in `pieces` IDAT chunks, after `empty` empty chunks."""
        step = -(-len(pixels) // pieces)
        return (
            shot[:idat]
            + png_chunk(b"teSt", b"") * empty
            + b"".join(
                png_chunk(b"IDAT", pixels[i : i + step]) for i in range(0, len(pixels), step)
            )
            + png_chunk(b"IEND", b"")
        )

    within = split(pieces=10, empty=20_000 - 12)  # IHDR, the IDATs and IEND: 20,000 chunks
    r = await world.send(world.tester, files=screenshots(within))
    assert r.status_code == 201, r.text
    assert [(s["width"], s["height"]) for s in r.json()["screenshots"]] == [(64, 48)]
    for many in (split(pieces=10, empty=20_000 - 11), split(pieces=len(pixels), empty=800_000)):
        message = refused(
            await world.send(world.tester, files=screenshots(many)), SHOTS, UNREADABLE
        )
        assert message == "screenshot 1 has more than 20,000 chunks: it is not a PNG to decode"


# The measure, in a process of its own so that its peak memory is the request's: the app over
# ASGI on the test's database, a warm-up feedback, then the bomb. The screenshots are decoded in
# worker processes (feedback/images.py): each one's peak (VmHWM) counts too, from /proc.
_MEASURE = textwrap.dedent(
    """
    import asyncio, json, pathlib, resource, sys
    import httpx
    from buildbay.app import create_app
    from buildbay.config import Settings

    settings = Settings()  # from the environment: the test's database, key and data
    bomb = open(sys.argv[1], "rb").read()
    ids = json.loads(sys.argv[2])

    def descendants(pid):
        found = []
        for children in pathlib.Path(f"/proc/{pid}/task").glob("*/children"):
            for child in children.read_text().split():
                found += [int(child), *descendants(int(child))]
        return found

    def peaks_mib():
        peaks = {"self": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
        for pid in descendants("self"):
            for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    peaks[str(pid)] = int(line.split()[1]) / 1024
        return peaks

    async def main():
        app = create_app(settings, migrate_on_start=False)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as c:
            headers = {"Authorization": "Bearer " + ids["token"]}
            def form(data):
                return [("text", (None, b"x")), ("category", (None, b"bug")),
                        ("screenshots", ("s.png", data, "image/png"))]
            warm = await c.post(ids["url"], files=form(ids["small"].encode("latin-1")),
                                headers=headers)
            assert warm.status_code == 201, warm.text
            before = peaks_mib()
            r = await c.post(ids["url"], files=form(bomb), headers=headers)
            after = peaks_mib()
        await app.state.ctx.dispose()
        print(json.dumps({"status": r.status_code, "body": r.json(),
                          "before": before, "after": after}))

    asyncio.run(main())
    """
)


async def test_the_bomb_is_refused_without_taking_100_mib_of_memory(
    world: World, settings: Settings, tmp_path: Path
) -> None:
    full = png_bomb(rows=50_000 // 8)  # a longer stream of pixels, still a small file
    path = tmp_path / "bomb.png"
    path.write_bytes(full)
    ids = {
        "token": world.tester.access_token,
        "url": world.feedback_url(),
        "small": png((640, 480)).decode("latin-1"),
    }
    env = {k: v for k, v in os.environ.items() if not k.startswith("BUILDBAY_")}
    env.update(
        BUILDBAY_DATA_DIR=str(settings.data_dir),
        BUILDBAY_DATABASE_URL=settings.resolved_database_url,
        BUILDBAY_SECRET_KEY=TEST_SECRET,
        BUILDBAY_PUBLIC_URL=BASE_URL,
        BUILDBAY_SWEEP_INTERVAL_SECONDS="0",
    )
    measured = subprocess.run(  # noqa: ASYNC221 (the measure is this process's child)
        [sys.executable, "-c", _MEASURE, str(path), json.dumps(ids)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert measured.returncode == 0, measured.stderr[-3000:]
    result = json.loads(measured.stdout.strip().splitlines()[-1])

    assert result["status"] == 422, result
    assert result["body"]["code"] == UNREADABLE
    assert result["body"]["errors"][0]["field"] == "screenshots"
    before, after = result["before"], result["after"]
    assert len(after) > 1, after  # the server's process and its image worker(s) at least
    for process, peak in after.items():  # MiB of peak memory, a process started since: all of it
        print(f"peak memory of {process}: {before.get(process, 0):.0f} MiB, then {peak:.0f}")
        assert peak - before.get(process, 0) < 100, result

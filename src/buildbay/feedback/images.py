"""A screenshot, made safe to keep and show: decoded with Pillow (which says whether it is a PNG,
JPEG or HEIC image at all: its name and Content-Type are never asked), refused past MAX_PIXELS
before a pixel is decoded, turned upright, and encoded anew with nothing but its pixels.

- Formats: PNG stays PNG (lossless: text in a screenshot stays sharp, transparency kept; zlib
  at PNG_COMPRESS_LEVEL); JPEG stays JPEG (quality JPEG_QUALITY); HEIC (an iPhone's photos
  and, if so set, screenshots) is decoded with pillow-heif and becomes a JPEG, which every
  browser shows. Anything else, including an image that does not decode to its end, is
  refused.
- Decompression bombs: the header's size is checked before decoding, and Pillow's own limit
  (`Image.MAX_IMAGE_PIXELS`) is set to the same number, so a file that claims 50,000 x 50,000
  pixels costs the few bytes of its header, not gigabytes.
- Scans: a progressive JPEG is decoded in scans, each a pass over the whole image, and one
  scan can take a dozen bytes: a 10 MiB file of 40 megapixels and 600,000 scans would keep a
  worker busy for hours. A JPEG of more than MAX_JPEG_SCANS scans (libjpeg's progressive JPEGs
  have 10, mozjpeg's a few more) is refused before Pillow opens it, its scans counted by
  walking its markers as the decoder does (and one of more than MAX_JPEG_SEGMENTS segments:
  Pillow reads the markers before the first scan in Python, 7 seconds for 2 million empty
  comments).
- Chunks: Pillow reads a PNG's chunks one by one in Python; 10 MiB of empty ones (800,000)
  took 9 seconds of a worker, holding the interpreter. A PNG of more than MAX_PNG_CHUNKS chunks
  (an encoder writes its pixels in chunks of 8 KiB or more: 1,300 for 10 MiB) is refused,
  counted by their lengths alone before Pillow opens it.
- Metadata: none survives. EXIF (GPS position, device, time), XMP, IPTC, PNG text chunks,
  JPEG comments and the ICC profile are dropped; only the EXIF orientation is used first, to
  turn the pixels upright. A colour profile other than sRGB is applied to the pixels (converted
  to sRGB), not kept: a Display P3 screenshot keeps its colours (within sRGB's gamut), and no
  profile's text (which can name a device or its owner, for a calibrated display) is kept.
- Work: decoding and encoding take processor time and memory, and Pillow holds the
  interpreter's lock while it encodes a PNG (into a buffer, as PNG's writer does): in threads of
  the server's own process, 20 testers' screenshots made every other request wait (bench/
  feedback.py, docs/performance.md). So they run in WORKERS processes of their own (started
  when first needed, from the fork server the build files' readers use where there is one,
  at the lowest scheduling priority, SCHED_IDLE: they take the cores the requests leave), one
  feedback's screenshots at a time in each: at most WORKERS feedback are being re-encoded in a
  server process whatever the number of senders, a feedback waits only for those ahead of it,
  and only those hold their bytes in the server's memory (a 40-megapixel image takes ~160 MB
  while it is re-encoded, in the worker). A worker that dies (a codec's crash on a crafted
  file, or the kernel's out-of-memory killer) is replaced and the image tried once more in a
  new one: an image that ends two workers is refused as one that does not decode.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import fcntl
import io
import multiprocessing
import os
import re
import struct
import tempfile
import threading
import time
import weakref
import zlib
from collections.abc import Iterable
from concurrent.futures.process import BrokenProcessPool
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any, Protocol

import pillow_heif
from PIL import Image, ImageCms, ImageOps, UnidentifiedImageError

from buildbay.feedback.priority import lower_priority

MAX_PIXELS = 40_000_000  # 40 megapixels: an 8K display's screenshot (33 MP) passes
JPEG_QUALITY = 90
# zlib's level for a PNG: 3, not Pillow's 6. Deflating is most of a PNG's re-encoding, and past 3
# zlib searches much longer for little: a phone's 1170 x 2532 screenshot of text and flat
# colours took 163 ms at 6 and 99 at 3 for 11% more bytes (341 and 380 KiB), one with noise all
# over (bench/feedback.py's, 2 MiB) 941 and 371 ms for the same bytes; 1 saves no more time.
PNG_COMPRESS_LEVEL = 3
MAX_JPEG_SCANS = 100
MAX_JPEG_SEGMENTS = 10_000  # its markers with a length, RSTn aside
MAX_PNG_CHUNKS = 20_000
# A worker for every two cores, at most two: on a 2-core host one core stays the requests'.
WORKERS = max(1, min(2, (os.cpu_count() or 2) // 2))
SCREENSHOT_PREFIX = "screenshot-"  # a re-encoded screenshot's temporary file, in the spool
# Pillow warns past its limit and refuses past twice it; the limit here is the same number, and
# `reencode` refuses past it before Pillow's own check comes into play.
Image.MAX_IMAGE_PIXELS = MAX_PIXELS
pillow_heif.register_heif_opener()

# What `Image.open` may take a file for; anything else is not tried (GIF, BMP, TIFF, WebP, ...).
_FORMATS = ("PNG", "JPEG", "HEIF")
# A JPEG with a second image (an iPhone's, say) opens as MPO: its first image is the photo.
_AS_JPEG = {"JPEG", "MPO", "HEIF"}
# The next marker with a length, as libjpeg finds it: past any garbage, fill bytes, stuffed
# zeros and the markers that stand alone (TEM, the restart markers RSTn between a scan's
# intervals, SOI). Any other is followed by its segment's length. (`\xff\xff*`, not `\xff+`: a
# literal first byte, which the regular expression engine looks for 15 times as fast.)
_MARKER = re.compile(rb"\xff\xff*([^\x00\x01\xd0-\xd8\xff])")
_SOS, _EOI = 0xDA, 0xD9
_PNG_CHUNK = struct.Struct(">I4s")
_PNG_SIGNATURE, _JPEG_SIGNATURE = b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff"
_SRGB = ImageCms.createProfile("sRGB")
# The start method of the build files' readers (builds/readers.py): one fork server per process.
_CONTEXT = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"


class NotAnImage(ValueError):
    """The file is not an image this server takes, or not one it may decode; says why."""


@dataclass
class Reencoded:
    """A screenshot encoded anew: its bytes in a temporary file (gone with `close`)."""

    file: IO[bytes]
    size: int
    width: int
    height: int
    content_type: str  # image/png or image/jpeg
    extension: str  # png or jpg

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.file.close()


@dataclass(frozen=True)
class Encoded:
    """A screenshot's new bytes and what they are."""

    data: bytes
    width: int
    height: int
    content_type: str  # image/png or image/jpeg
    extension: str  # png or jpg


async def reencode_all(sources: list[str], spool_dir: Path) -> list[Reencoded]:
    """`reencode` of each screenshot as it arrived (`sources`: the paths of their files,
    `spool_file`s, written), in order, in a worker process, each re-encoded screenshot in a
    temporary file under `spool_dir`; NotAnImage names the first that fails by its position
    (from 1). Waits, holding nothing but the files, while WORKERS other feedback are being
    re-encoded.

    The worker reads the screenshot from its file and writes the new bytes to a file this
    process made (and removes: a worker that dies leaves nothing behind), and answers what it
    wrote: no screenshot's bytes pass through this process, where each copy of 2 MiB (read back,
    pickled to the worker, its answer unpickled and spooled again) cost the server's threads
    the interpreter's lock beside the requests (bench/feedback.py, docs/performance.md)."""
    done: list[Reencoded] = []
    try:
        async with _turns():
            for position, source in enumerate(sources, start=1):
                try:
                    done.append(await _in_worker(source, spool_dir))
                except NotAnImage as exc:
                    raise NotAnImage(f"screenshot {position} {exc}") from None
    except BaseException:
        for made in done:
            made.close()
        raise
    return done


# One semaphore of WORKERS places for each event loop (a server process has one; the tests make
# many): a feedback holds a place while its screenshots are re-encoded, in the order they came.
_TURNS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
    weakref.WeakKeyDictionary()
)


def _turns() -> asyncio.Semaphore:
    loop = asyncio.get_running_loop()
    turns = _TURNS.get(loop)
    if turns is None:
        turns = _TURNS[loop] = asyncio.Semaphore(WORKERS)
    return turns


async def _in_worker(source: str, spool_dir: Path) -> Reencoded:
    """`reencode_into(source, ...)` in a worker process, into a file of `spool_dir`; in a second
    one if the first dies, into a file of its own (a worker of the broken pool may yet write
    to the first one before it is stopped)."""
    for _ in range(2):
        pool = _WORKERS.pool()
        out = await asyncio.to_thread(spool_file, spool_dir)
        try:
            written = await asyncio.wrap_future(pool.submit(reencode_into, source, out.name))
        except BrokenProcessPool:
            out.close()
            _WORKERS.replace(pool)
            continue
        except BaseException:
            out.close()
            raise
        return Reencoded(out, **asdict(written))
    raise NotAnImage("is not a whole image: it does not decode")


class _Workers:
    """The worker processes of this server process, started when first needed (shared by every
    app a process makes, as the tests make many), made anew when one has died."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None

    def pool(self) -> concurrent.futures.ProcessPoolExecutor:
        with self._lock:
            if self._pool is None:
                context: Any = multiprocessing.get_context(_CONTEXT)
                if _CONTEXT == "forkserver":  # Pillow imported once, if this starts the server
                    context.set_forkserver_preload([__name__])
                self._pool = concurrent.futures.ProcessPoolExecutor(
                    WORKERS, mp_context=context, initializer=lower_priority
                )
            return self._pool

    def replace(self, broken: concurrent.futures.ProcessPoolExecutor) -> None:
        with self._lock:
            if self._pool is broken:
                self._pool = None
        broken.shutdown(wait=False, cancel_futures=True)

    def started(self) -> concurrent.futures.ProcessPoolExecutor | None:
        with self._lock:
            return self._pool


_WORKERS = _Workers()


def worker_pids() -> list[int]:
    """The worker processes' ids, once started (for tests), asked of the workers themselves
    (the executor has no public table of its processes): WORKERS questions at once, each
    answered after a moment, so that each worker takes one."""
    pool = _WORKERS.started()
    if pool is None:
        return []
    asked = [pool.submit(_own_pid, 0.2) for _ in range(WORKERS)]
    return sorted({answer.result() for answer in asked})


def _own_pid(hold: float) -> int:
    time.sleep(hold)
    return os.getpid()


def spool_file(spool_dir: Path) -> IO[bytes]:
    """A file under `spool_dir` for a screenshot on its way, as it arrives (submission.py) or
    as a worker re-encodes it: named, so that a worker opens it by its path; removed when
    closed, and locked while open, so that the sweeper removes it only if a crash left it
    (builds/sweeper.py `sweep`)."""
    out = tempfile.NamedTemporaryFile(dir=spool_dir, prefix=SCREENSHOT_PREFIX)  # noqa: SIM115
    fcntl.flock(out.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    return out


class _Closable(Protocol):
    def close(self) -> None: ...


async def discard(spooled: Iterable[_Closable]) -> None:
    """`close` each (a feedback's `Submission`, its `Reencoded` screenshots): in a worker
    thread, as closing a spool file removes it, and the kernel then frees the pages just
    written, a millisecond or several at times, which the event loop would wait for. Closed here
    if the request is cancelled before the thread takes them."""
    spooled = list(spooled)

    def close_all() -> None:
        for each in spooled:
            each.close()

    try:
        await asyncio.to_thread(close_all)
    except asyncio.CancelledError:
        close_all()  # each close may be called again
        raise


@dataclass(frozen=True)
class Written:
    """What a worker answers: what it wrote to the file it was given."""

    size: int
    width: int
    height: int
    content_type: str  # image/png or image/jpeg
    extension: str  # png or jpg


def reencode_into(source: str, path: str) -> Written:
    """`reencode` of the image in the file at `source`, written to the file at `path`: for a
    worker process."""
    with os.fdopen(os.open(source, os.O_RDONLY | os.O_NOFOLLOW), "rb") as image:
        encoded = reencode(image)
    # Not created: a file its owner removed meanwhile (the request gone) stays removed.
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW), "wb") as out:
        out.write(encoded.data)
    return Written(
        len(encoded.data), encoded.width, encoded.height, encoded.content_type, encoded.extension
    )


def reencode(source: IO[bytes]) -> Encoded:
    """The image in `source` (read from its start), upright and without metadata, as a PNG (a
    PNG's) or a JPEG (a JPEG's or a HEIC's). NotAnImage if it is none of those, is larger than
    MAX_PIXELS, or does not decode. Blocking, and the interpreter's lock held for much of it:
    for a worker process."""
    _refuse_costly(source)
    source.seek(0)
    try:
        image = Image.open(source, formats=_FORMATS)
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise _too_large() from None
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError, EOFError):
        raise NotAnImage("is not a PNG, JPEG or HEIC image") from None
    with image:
        width, height = image.size
        if width * height > MAX_PIXELS:  # from the header alone: nothing decoded yet
            raise _too_large()
        as_jpeg = image.format in _AS_JPEG
        try:
            image.load()
            _upright(image)
            clean = _pixels_only(image, as_jpeg=as_jpeg)
            return _encoded(clean, as_jpeg=as_jpeg)
        except Image.DecompressionBombError:
            raise _too_large() from None
        except (OSError, ValueError, SyntaxError, EOFError, zlib.error, MemoryError) as exc:
            raise NotAnImage("is not a whole image: it does not decode") from exc


def _refuse_costly(source: IO[bytes]) -> None:
    """NotAnImage for a PNG of more than MAX_PNG_CHUNKS chunks, or a JPEG of more than
    MAX_JPEG_SCANS scans: told by their signature and counted before Pillow, whose own reading
    of a PNG's chunks or a JPEG's markers up to its pixels is in Python, reads a byte."""
    source.seek(0)
    head = source.read(len(_PNG_SIGNATURE))
    if head != _PNG_SIGNATURE and not head.startswith(_JPEG_SIGNATURE):
        return  # a HEIC, or what Pillow finds is no image
    source.seek(0)
    data = source.read()
    if head == _PNG_SIGNATURE:
        if _png_chunks(data) > MAX_PNG_CHUNKS:
            raise NotAnImage(f"has more than {MAX_PNG_CHUNKS:,} chunks: it is not a PNG to decode")
    elif _jpeg_scans(data) > MAX_JPEG_SCANS:
        raise NotAnImage(f"has more than {MAX_JPEG_SCANS} scans: it would take too long to decode")


def _jpeg_scans(data: bytes) -> int:
    """How many scans (SOS segments) the JPEG `data` has before its first EOI (its first
    image, the one decoded), counted up to one past MAX_JPEG_SCANS. NotAnImage past
    MAX_JPEG_SEGMENTS segments (no encoder writes thousands; walking millions of empty ones
    would hold a worker)."""
    scans, at = 0, 2  # past SOI
    for _ in range(MAX_JPEG_SEGMENTS):
        found = _MARKER.search(data, at)
        if found is None or found.group(1)[0] == _EOI:
            return scans
        at = found.end()
        at += int.from_bytes(data[at : at + 2], "big")  # the segment's length counts itself
        if found.group(1)[0] == _SOS:
            scans += 1
            if scans > MAX_JPEG_SCANS:
                return scans
    raise NotAnImage(f"has more than {MAX_JPEG_SEGMENTS:,} segments: it is not a JPEG to decode")


def _png_chunks(data: bytes) -> int:
    """How many chunks the PNG `data` has up to its IEND (or its end), counted up to one past
    MAX_PNG_CHUNKS by their lengths alone."""
    chunks, at = 0, len(_PNG_SIGNATURE)
    while at + 8 <= len(data) and chunks <= MAX_PNG_CHUNKS:
        length, kind = _PNG_CHUNK.unpack_from(data, at)
        chunks += 1
        if kind == b"IEND":
            break
        at += 12 + length  # length, type, data, CRC
    return chunks


def _upright(image: Image.Image) -> None:
    """The image turned as its EXIF orientation says, first, from the EXIF about to be dropped
    (in place: no second copy). EXIF that is not EXIF (a PNG's eXIf chunk of anything: Pillow
    reads a JPEG's more leniently) says nothing: the pixels are the image, as they are."""
    # SyntaxError: Pillow's "not a TIFF file", the EXIF's header is not one.
    with contextlib.suppress(SyntaxError):
        ImageOps.exif_transpose(image, in_place=True)


def _too_large() -> NotAnImage:
    # The same words whichever check refused it (Pillow's own, in `open`, says no size).
    return NotAnImage(f"has more than {MAX_PIXELS // 1_000_000} million pixels")


def _pixels_only(image: Image.Image, *, as_jpeg: bool) -> Image.Image:
    """The pixels in sRGB and in a mode the output format takes; the image's metadata gone."""
    icc = image.info.get("icc_profile")
    # Kept: what makes pixels transparent in a palette or greyscale PNG is not metadata.
    transparency = None if as_jpeg else image.info.get("transparency")
    image.info = {}
    if icc and image.mode in ("RGB", "RGBA"):
        try:
            profile = ImageCms.ImageCmsProfile(io.BytesIO(icc))
            ImageCms.profileToProfile(image, profile, _SRGB, outputMode=image.mode, inPlace=True)
        except (ImageCms.PyCMSError, OSError, ValueError):
            pass  # a profile that is not one: the pixels as they are
    if as_jpeg and image.mode not in ("RGB", "L"):
        image = image.convert("RGB")  # CMYK, an alpha channel (a HEIC's), 16-bit
    if transparency is not None:
        image.info["transparency"] = transparency
    return image


def _encoded(image: Image.Image, *, as_jpeg: bool) -> Encoded:
    out = io.BytesIO()
    if as_jpeg:
        # Only what is passed is written: no EXIF, ICC profile or comment.
        image.save(out, "JPEG", quality=JPEG_QUALITY, exif=b"", icc_profile=None)
        content_type, extension = "image/jpeg", "jpg"
    else:
        image.save(out, "PNG", compress_level=PNG_COMPRESS_LEVEL, exif=b"", icc_profile=None)
        content_type, extension = "image/png", "png"
    return Encoded(out.getvalue(), image.width, image.height, content_type, extension)

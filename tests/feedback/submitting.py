"""What the tests of sending feedback share: real images made with Pillow (and pillow-heif), a
project with a build and its people, and the feedback form as a client sends it."""

from __future__ import annotations

import io
import struct
import zlib
from dataclasses import dataclass, field
from typing import Any

import httpx
from fastapi import FastAPI
from PIL import Image, ImageCms, PngImagePlugin

from buildbay.auth.reads import user_by_id
from buildbay.builds.dependencies import build_reads, install_links
from buildbay.context import AppContext
from buildbay.db.engine import finish
from buildbay.db.reads import Reads
from tests.conftest import Account, Api

GPS_IFD, ORIENTATION, MAKE = 0x8825, 0x0112, 0x010F


def exif_with_gps(orientation: int = 1) -> Image.Exif:
    """EXIF as a phone writes it: where (GPS), on what, and which way up."""
    exif = Image.Exif()
    exif[MAKE] = "Apple"
    exif[ORIENTATION] = orientation
    gps = exif.get_ifd(GPS_IFD)
    gps.update({1: "N", 2: (52.0, 31.0, 12.5), 3: "E", 4: (13.0, 24.0, 3.25)})
    return exif


def jpeg_with_gps(size: tuple[int, int] = (64, 32), orientation: int = 1) -> bytes:
    """A JPEG whose EXIF says where it was taken, with a comment and an ICC profile too."""
    image = Image.new("RGB", size, (220, 40, 40))
    image.paste((20, 20, 220), (0, 0, size[0] // 2, size[1]))  # left half blue: which way up
    out = io.BytesIO()
    srgb = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()
    image.save(
        out, "JPEG", quality=95, exif=exif_with_gps(orientation), icc_profile=srgb,
        comment=b"taken at home",
    )  # fmt: skip
    return out.getvalue()


def png_with_text(size: tuple[int, int] = (40, 30), mode: str = "RGBA") -> bytes:
    """A PNG carrying text chunks (author, comment), EXIF with GPS, and an ICC profile."""
    image = Image.new(mode, size, (10, 120, 200, 255) if mode == "RGBA" else (10, 120, 200))
    info = PngImagePlugin.PngInfo()
    info.add_text("Author", "Jane Tester")
    info.add_itxt("Comment", "my flat, 3rd floor")
    out = io.BytesIO()
    srgb = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()
    image.save(out, "PNG", pnginfo=info, exif=exif_with_gps(), icc_profile=srgb)
    return out.getvalue()


def heic_with_gps(size: tuple[int, int] = (64, 48)) -> bytes:
    """An HEIC (an iPhone's photo format), with EXIF GPS, encoded by pillow-heif."""
    import pillow_heif

    pillow_heif.register_heif_opener()
    image = Image.new("RGB", size, (30, 160, 60))
    out = io.BytesIO()
    image.save(out, "HEIF", exif=exif_with_gps().tobytes(), quality=90)
    return out.getvalue()


def png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png_bomb(width: int = 50_000, height: int = 50_000, rows: int = 64) -> bytes:
    """A real PNG header for `width` x `height` 8-bit grey pixels (2.5 GB decoded at the
    default), with the compressed first `rows` rows: a few kilobytes that claim gigabytes."""
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    compressor = zlib.compressobj(9)
    row = b"\x00" * (width + 1)  # filter byte, then the row's pixels
    data = b"".join(compressor.compress(row) for _ in range(rows)) + compressor.flush()
    return (
        b"\x89PNG\r\n\x1a\n"
        + png_chunk(b"IHDR", header)
        + png_chunk(b"IDAT", data)
        + png_chunk(b"IEND", b"")
    )


def _segment(marker: int, payload: bytes) -> bytes:
    return bytes([0xFF, marker]) + struct.pack(">H", len(payload) + 2) + payload


def _entropy(bits: str) -> bytes:
    """Huffman-coded bits as a scan's data: padded with ones, each 0xFF byte stuffed."""
    bits += "1" * (-len(bits) % 8)
    out = bytearray()
    for i in range(0, len(bits), 8):
        out.append(int(bits[i : i + 8], 2))
        if out[-1] == 0xFF:
            out.append(0)
    return bytes(out)


def jpeg_scan_bomb(
    width: int, height: int, scans: int, between: bytes = b"", comments: int = 0
) -> bytes:
    """A real greyscale progressive JPEG whose AC scan is there `scans` times: each a dozen
    bytes (one end-of-band run over every block) that make the decoder walk the whole image
    once more (libjpeg warns of the repeated progression, and decodes on). `between`: bytes
    before each scan (garbage libjpeg skips); `comments`: empty COM segments first."""
    blocks = ((width + 7) // 8) * ((height + 7) // 8)
    head = (
        b"\xff\xd8"
        + _segment(0xFE, b"") * comments
        + _segment(0xDB, b"\x00" + bytes([1] * 64))
        + _segment(0xC2, struct.pack(">BHHB", 8, height, width, 1) + b"\x01\x11\x00")
        # DC table 0: one symbol, 0 (no difference), coded "0"; AC table 0: one, EOB14 (0xE0).
        + _segment(0xC4, b"\x00" + bytes([1] + [0] * 15) + b"\x00")
        + _segment(0xC4, b"\x10" + bytes([1] + [0] * 15) + b"\xe0")
        + _segment(0xDA, b"\x01\x01\x00\x00\x00\x00")
        + _entropy("0" * blocks)
    )
    runs = -(-blocks // 32767)  # EOB14 with its 14 bits all ones: 32,767 blocks a symbol
    scan = _segment(0xDA, b"\x01\x01\x00\x01\x3f\x00") + _entropy(("0" + "1" * 14) * runs)
    return head + (between + scan) * scans + b"\xff\xd9"


def png(size: tuple[int, int] = (8, 8), color: tuple[int, int, int] = (0, 128, 255)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, color).save(out, "PNG")
    return out.getvalue()


def opened(data: bytes) -> Image.Image:
    """An image read back with Pillow (decoded whole)."""
    image = Image.open(io.BytesIO(data))
    image.load()
    return image


Files = list[tuple[str, tuple[str, bytes, str]]]


def screenshots(*images: bytes, name: str = "shot.png", kind: str = "image/png") -> Files:
    """The `screenshots` field, once per file, as httpx sends it."""
    return [("screenshots", (name, data, kind)) for data in images]


def form_parts(fields: dict[str, str | None] | None = None, files: Files | None = None) -> Any:
    """A feedback's form as httpx's `files` (always multipart: a form without files would be
    sent urlencoded): `text` and `category` unless `fields` changes them (None: left out)."""
    form: dict[str, str | None] = {"text": "The app crashes on launch", "category": "crash"}
    form.update(fields or {})
    parts: list[Any] = [(k, (None, v.encode())) for k, v in form.items() if v is not None]
    return parts + list(files or [])


@dataclass
class World:
    """A project with an application and a ready build; its owner, a developer, a tester the
    build is distributed to (`everyone`), and a stranger."""

    client: httpx.AsyncClient
    app: FastAPI
    api: Api
    owner: Account
    developer: Account
    tester: Account
    stranger: Account
    project: dict[str, Any]
    application: dict[str, Any]
    build: dict[str, Any]
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ctx(self) -> AppContext:
        ctx: AppContext = self.app.state.ctx
        return ctx

    @property
    def builds(self) -> str:
        return f"/api/app-distribution/{self.project['id']}/{self.application['id']}/builds"

    def feedback_url(self, build: dict[str, Any] | None = None) -> str:
        return f"{self.builds}/{(build or self.build)['buildId']}/feedback"

    async def send(
        self,
        who: Account | dict[str, str] | None,
        fields: dict[str, str | None] | None = None,
        files: Files | None = None,
        build: dict[str, Any] | None = None,
    ) -> httpx.Response:
        """Feedback as a client sends it: `multipart/form-data` (httpx makes it)."""
        headers = who.headers if isinstance(who, Account) else (who or {})
        return await self.client.post(
            self.feedback_url(build), files=form_parts(fields, files), headers=headers
        )

    async def upload(self, name: str = "app-release.apk") -> dict[str, Any]:
        return await upload(self.client, self.owner, self.project["id"], self.application["id"])

    async def own_link(self, account: Account, build: dict[str, Any] | None = None) -> str:
        """The token of `account`'s own install link of the build (a distribution mail's, or
        the console's Install: builds/install.py `own`)."""
        ctx = self.ctx
        db = ctx.sessions()
        ok = False
        try:
            reads = Reads.within(db)
            record = await build_reads(ctx, reads).get(
                self.application["id"], (build or self.build)["buildId"]
            )
            person = await user_by_id(reads, account.user["id"])
            assert person is not None
            link = await install_links(ctx, db).own(record, person, 24)
            ok = True
        finally:
            await finish(db, ok=ok)
        return ctx.install_tokens.token(link.id)


_uploads = iter(range(1, 1_000_000))


async def upload(
    client: httpx.AsyncClient, account: Account, project_id: str, app_id: str
) -> dict[str, Any]:
    """A ready build of bytes of its own (conftest's Api.upload, but the bytes go over real
    HTTP when the upload address is a bucket's)."""
    data = b"PK\x03\x04 a build for feedback %d" % next(_uploads)
    base = f"/api/app-distribution/{project_id}/{app_id}/builds"
    r = await client.post(
        f"{base}/upload-link",
        json={"fileName": "app-release.apk", "fileSize": len(data)},
        headers=account.headers,
    )
    assert r.status_code == 201, r.text
    link = r.json()
    if link["uploadUrl"].startswith(str(client.base_url)):
        r = await client.put(link["uploadUrl"], content=data, headers=link["uploadHeaders"])
    else:
        async with httpx.AsyncClient(timeout=30) as outside:
            r = await outside.put(link["uploadUrl"], content=data, headers=link["uploadHeaders"])
    assert r.status_code == 200, r.text
    r = await client.post(
        f"{base}/verify", json={"buildId": link["buildId"]}, headers=account.headers
    )
    assert r.status_code == 200, r.text
    build: dict[str, Any] = r.json()
    return build


async def make_world(api: Api, client: httpx.AsyncClient, app: FastAPI, owner: Account) -> World:
    developer = await api.register("dev@example.com")
    tester = await api.register("tess@example.com")
    stranger = await api.register("stranger@example.com")
    project = await api.project(owner)
    await api.add_member(owner, project["id"], developer, "developer")
    await api.add_member(owner, project["id"], tester, "tester")
    application = await api.application(owner, project["id"])
    build = await upload(client, owner, project["id"], application["id"])
    return World(client, app, api, owner, developer, tester, stranger, project, application, build)

"""What an .ipa says about itself: Info.plist, embedded.mobileprovision, and the app icon
with Apple's CgBI PNG encoding undone."""

from __future__ import annotations

import bisect
import heapq
import itertools
import plistlib
import re
import struct
import zipfile
import zlib
from datetime import UTC, datetime
from typing import IO, Any

from buildbay.builds.archive import MetadataError, Parsed, open_archive, read_entry
from buildbay.devices.enums import normalise_udid

PLIST_LIMIT = 1024 * 1024  # Info.plist and the provisioning profile
ICON_LIMIT = 2 * 1024 * 1024  # an icon file, compressed or not
ICON_PIXELS_LIMIT = 1024 * 1024 * 4  # decoded RGBA bytes of an icon (a 1024 x 1024 icon is 4 MiB)
ICON_SIDE_LIMIT = 2048  # pixels on either side of an icon (Apple's largest is 1024)
# Info.plist's icon file names considered (Xcode writes a handful), and the icon files decoded at
# most, largest first, before giving up on an icon: what a file says costs no more than this.
ICON_NAMES_LIMIT = 100
ICON_TRIES_LIMIT = 8

_APP_INFO = re.compile(r"^Payload/[^/]+\.app/Info\.plist$")
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def parse_ipa(file: IO[bytes]) -> Parsed:
    """Bundle id, versions, minimum OS, name, provisioning profile and icon of an .ipa."""
    archive, names = open_archive(file)
    with archive:
        infos = [e for name, e in names.items() if _APP_INFO.match(name)]
        if len(infos) != 1:
            raise MetadataError("no Payload/<name>.app/Info.plist (or more than one)")
        app_dir = infos[0].filename.rsplit("/", 1)[0] + "/"
        info = _plist(read_entry(archive, infos[0], PLIST_LIMIT))
        bundle_id = info.get("CFBundleIdentifier")
        if not isinstance(bundle_id, str) or not bundle_id:
            raise MetadataError("Info.plist has no CFBundleIdentifier")
        metadata: dict[str, Any] = {
            "bundleId": bundle_id,
            "shortVersion": _text(info.get("CFBundleShortVersionString")),
            "buildNumber": _text(info.get("CFBundleVersion")),
            "minOs": _text(info.get("MinimumOSVersion")),
            "appName": _text(info.get("CFBundleDisplayName") or info.get("CFBundleName")),
            "provisioning": None,
        }
        profile = names.get(app_dir + "embedded.mobileprovision")
        udids: tuple[str, ...] = ()
        if profile is not None:
            read = _provisioning(read_entry(archive, profile, PLIST_LIMIT))
            if read is not None:
                metadata["provisioning"], udids = read
        icon = _icon(archive, names, app_dir, info)
    return Parsed(metadata, icon, udids, platform="ios")


def _plist(data: bytes) -> dict[str, Any]:
    try:
        value = plistlib.loads(data)
    except Exception as exc:  # plistlib raises several types for malformed input
        raise MetadataError(f"not a property list: {type(exc).__name__}") from None
    if not isinstance(value, dict):
        raise MetadataError("the property list is not a dictionary")
    return value


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _provisioning(signed: bytes) -> tuple[dict[str, Any], tuple[str, ...]] | None:
    """Type, expiry and device count from a provisioning profile (a plist inside a CMS
    envelope), and the UDIDs it lists (those that are UDIDs, upper case, each once)."""
    start, end = signed.find(b"<?xml"), signed.find(b"</plist>")
    if start < 0 or end < start:
        return None
    profile = _plist(signed[start : end + len(b"</plist>")])
    devices = profile.get("ProvisionedDevices")
    entitlements = profile.get("Entitlements")
    debuggable = isinstance(entitlements, dict) and entitlements.get("get-task-allow") is True
    if profile.get("ProvisionsAllDevices") is True:
        kind = "enterprise"
    elif isinstance(devices, list):
        kind = "development" if debuggable else "ad-hoc"
    else:
        kind = "app-store"
    expires = profile.get("ExpirationDate")
    udids = (
        tuple(dict.fromkeys(u for d in devices if isinstance(d, str) if (u := normalise_udid(d))))
        if isinstance(devices, list)
        else ()
    )
    summary = {
        "type": kind,
        "expiresAt": (
            expires.replace(tzinfo=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            if isinstance(expires, datetime)
            else None
        ),
        "deviceCount": len(devices) if isinstance(devices, list) else None,
    }
    return summary, udids


def _icon(
    archive: zipfile.ZipFile, names: dict[str, zipfile.ZipInfo], app_dir: str, info: dict[str, Any]
) -> bytes | None:
    """The largest PNG among the icon files Info.plist names, as a standard PNG.

    Info.plist names icon files by prefix (`AppIcon60x60` for `AppIcon60x60@2x.png`). The app
    directory's PNGs are sorted once; each name considered is then a range of that list, found
    by bisection: linear in the archive, whatever the number of names and files."""
    prefixes = _icon_names(info)
    if not prefixes:
        return None
    pngs = sorted(
        (name[len(app_dir) :], entry)
        for name, entry in names.items()
        if name.startswith(app_dir)
        and name.endswith(".png")
        and "/" not in name[len(app_dir) :]
        and entry.file_size <= ICON_LIMIT
    )
    keys = [name for name, _ in pngs]
    ranges = sorted(
        (bisect.bisect_left(keys, prefix), bisect.bisect_left(keys, prefix + "\U0010ffff"))
        for prefix in prefixes
    )
    matched: list[zipfile.ZipInfo] = []
    end = 0
    for start, stop in ranges:  # the union of the ranges: each file once
        start = max(start, end)
        matched += (entry for _, entry in pngs[start:stop])
        end = max(end, stop)
    for entry in heapq.nlargest(ICON_TRIES_LIMIT, matched, key=lambda e: e.file_size):
        try:
            return normal_png(read_entry(archive, entry, ICON_LIMIT))
        except MetadataError:
            continue
    return None


def _icon_names(info: dict[str, Any]) -> list[str]:
    """The icon file names Info.plist gives (the primary icon's, for iPhone and iPad, then the
    old top-level list), each once, the first ICON_NAMES_LIMIT of them."""
    lists: list[list[Any]] = []
    for key in ("CFBundleIcons", "CFBundleIcons~ipad"):
        icons = info.get(key)
        primary = icons.get("CFBundlePrimaryIcon") if isinstance(icons, dict) else None
        files = primary.get("CFBundleIconFiles") if isinstance(primary, dict) else None
        if isinstance(files, list):
            lists.append(files)
    if isinstance(info.get("CFBundleIconFiles"), list):
        lists.append(info["CFBundleIconFiles"])
    chosen: dict[str, None] = {}  # ordered, each once
    for name in itertools.chain(*lists):
        if isinstance(name, str) and name:
            chosen[name] = None
            if len(chosen) == ICON_NAMES_LIMIT:
                break
    return list(chosen)


def normal_png(data: bytes) -> bytes:
    """`data` as a PNG any browser shows: Apple's CgBI variant (raw deflate, BGRA, premultiplied
    alpha) is converted; a standard PNG is returned as it is."""
    if not data.startswith(_PNG_SIGNATURE):
        raise MetadataError("not a PNG")
    chunks = list(_chunks(data))
    if not chunks or chunks[0][0] != b"CgBI":
        return data
    header = next((body for kind, body in chunks if kind == b"IHDR"), None)
    if header is None or len(header) != 13:
        raise MetadataError("PNG without IHDR")
    width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", header)
    if depth != 8 or color != 6 or interlace != 0:
        raise MetadataError("a CgBI PNG that is not 8-bit RGBA without interlace")
    row = width * 4 + 1
    if width * height * 4 > ICON_PIXELS_LIMIT or max(width, height) > ICON_SIDE_LIMIT:
        raise MetadataError("icon too large")
    inflater = zlib.decompressobj(-15)  # CgBI: raw deflate, no zlib header
    try:
        pixels = inflater.decompress(b"".join(b for k, b in chunks if k == b"IDAT"), row * height)
    except zlib.error as exc:
        raise MetadataError(f"icon data does not inflate: {exc}") from None
    if len(pixels) != row * height:
        raise MetadataError("icon data is shorter than its size")
    # BGRA -> RGBA. Filters work channel by channel (each byte against the same channel of its
    # neighbours), so swapping channels in the filtered rows equals swapping them in the pixels.
    # Alpha stays premultiplied: a slight darkening at soft edges, invisible on an icon.
    out = bytearray(pixels)
    for y in range(height):
        start = y * row + 1
        out[start : start + width * 4 : 4], out[start + 2 : start + width * 4 : 4] = (
            pixels[start + 2 : start + width * 4 : 4],
            pixels[start : start + width * 4 : 4],
        )
    body = [(b"IHDR", header), (b"IDAT", zlib.compress(bytes(out))), (b"IEND", b"")]
    return _PNG_SIGNATURE + b"".join(
        struct.pack(">I", len(chunk)) + kind + chunk + struct.pack(">I", zlib.crc32(kind + chunk))
        for kind, chunk in body
    )


def _chunks(data: bytes) -> list[tuple[bytes, bytes]]:
    chunks, offset = [], len(_PNG_SIGNATURE)
    while offset + 8 <= len(data):
        (length,) = struct.unpack(">I", data[offset : offset + 4])
        kind = data[offset + 4 : offset + 8]
        body = data[offset + 8 : offset + 8 + length]
        if len(body) != length:
            raise MetadataError("truncated PNG")
        chunks.append((kind, body))
        offset += 12 + length
        if kind == b"IEND":
            break
    return chunks
